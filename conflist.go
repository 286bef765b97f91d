package cninet

import "github.com/seed1280861d/cninet/internal/catalog"

// LoadConfList returns the conflist of the network called name from dir.
// Files ending in .conf, .conflist and .json are read in lexicographic
// order and the first one whose network has that name wins. A single-plugin
// .conf is upconverted to a conflist. A broken file that is not the named
// network's own is skipped; when the named network's own file is broken the
// error names the file and the cause (ErrInvalidConfig). When no file has
// the name the error lists the names that were found (ErrNetworkNotFound).
func LoadConfList(dir, name string) ([]byte, error) {
	return catalog.FindConfList(dir, name)
}

// BridgeConfig describes the default bridge network. An empty string field
// takes its value from DefaultBridgeConfig, except IPv6Subnet: "" means no
// IPv6.
type BridgeConfig struct {
	// NetworkName is the CNI network name (the conflist's "name").
	NetworkName string
	// BridgeName is the Linux bridge interface, at most 15 bytes.
	BridgeName string
	// AdminChainName is the firewall plugin's admin chain, where operators
	// add their own rules.
	AdminChainName string
	// IPv4Subnet is the canonical IPv4 CIDR workloads get addresses from.
	IPv4Subnet string
	// IPv6Subnet, when set, is a canonical IPv6 CIDR and makes the network
	// dual stack.
	IPv6Subnet string
	// HairpinMode lets a workload reach itself through its mapped ports.
	HairpinMode bool
	// ConsulCNI appends the consul-cni plugin (Consul service mesh).
	ConsulCNI bool
	// IPAMDataDir is where host-local records reservations.
	IPAMDataDir string
	// Backend is what the bridge masquerades and portmap maps ports with:
	// BackendIPTables ("" too) or BackendNFTables, which needs the
	// reference plugins v1.6.1 or later (Debian's 1.1.1 have only
	// iptables). The firewall plugin always uses iptables.
	Backend string
}

// DefaultBridgeConfig returns the default bridge network: network and
// bridge "nomad", admin chain "NOMAD-ADMIN", 172.26.64.0/20, no IPv6,
// reservations in /var/run/cni.
func DefaultBridgeConfig() BridgeConfig {
	return BridgeConfig(catalog.DefaultBridge())
}

// Backends the plugins can masquerade and map ports with. The bridge and
// ptp plugins choose with "ipMasqBackend", portmap with "backend"; the
// firewall plugin has no nftables backend.
const (
	BackendIPTables = "iptables"
	BackendNFTables = "nftables"
)

// BridgeConfList generates the default bridge conflist (cniVersion 1.0.0):
// loopback; bridge with ipMasq and host-local IPAM; firewall (iptables
// backend, cfg.AdminChainName); portmap (portMappings capability, snat);
// and consul-cni when cfg.ConsulCNI. With cfg.Backend BackendNFTables the
// bridge's ipMasqBackend and portmap's backend say "nftables"; with the
// default, neither field is written, which every plugin release reads as
// iptables. An invalid cfg is an ErrInvalidConfig
// error naming the field.
func BridgeConfList(cfg BridgeConfig) ([]byte, error) {
	return catalog.BridgeConfList(catalog.Bridge(cfg))
}

// WriteConfList validates conflist and writes it atomically to
// dir/<name>.conflist with mode 0644, creating dir if needed: the bytes go
// to a temporary file in dir, are synced, and replace the target by rename,
// so a reader (or a crash) never sees a half-written file. An invalid
// conflist is an ErrInvalidConfig error and writes nothing; a file system
// failure is an ErrIO error wrapping the cause, and leaves no temporary
// file behind.
func WriteConfList(dir string, conflist []byte) (path string, err error) {
	return catalog.WriteConfList(dir, conflist)
}
