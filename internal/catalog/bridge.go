package catalog

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/seed1280861d/cninet/internal/errs"
)

// Bridge is cninet.BridgeConfig, field for field (its documentation is
// there): the root converts one into the other.
type Bridge struct {
	NetworkName    string
	BridgeName     string
	AdminChainName string
	IPv4Subnet     string
	IPv6Subnet     string
	HairpinMode    bool
	ConsulCNI      bool
	IPAMDataDir    string
	Backend        string
}

// DefaultBridge is the default bridge network (cninet.DefaultBridgeConfig).
func DefaultBridge() Bridge {
	return Bridge{
		NetworkName:    "nomad",
		BridgeName:     "nomad",
		AdminChainName: "NOMAD-ADMIN",
		IPv4Subnet:     "172.26.64.0/20",
		IPAMDataDir:    "/var/run/cni",
	}
}

func (b Bridge) withDefaults() Bridge {
	d := DefaultBridge()
	for _, f := range []struct {
		v   *string
		def string
	}{
		{&b.NetworkName, d.NetworkName}, {&b.BridgeName, d.BridgeName},
		{&b.AdminChainName, d.AdminChainName}, {&b.IPv4Subnet, d.IPv4Subnet},
		{&b.IPAMDataDir, d.IPAMDataDir},
	} {
		if *f.v == "" {
			*f.v = f.def
		}
	}
	return b
}

// isChainName says whether s may name the firewall plugin's admin chain:
// 1-28 ASCII letters, digits, '_', '.' or '-'. A loop, not a regexp: a
// counted repetition such as {1,28} compiles to a program of 28 copies,
// which every process linking cninet (each cninet-shim start among them)
// would build at init.
func isChainName(s string) bool {
	if len(s) == 0 || len(s) > 28 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func (b Bridge) validate() error {
	switch {
	case !NameRule.MatchString(b.NetworkName):
		return fmt.Errorf("%w: network name %q does not match %s", errs.InvalidConfig, b.NetworkName, NameRule)
	case !NameRule.MatchString(b.BridgeName) || len(b.BridgeName) > 15:
		return fmt.Errorf("%w: bridge name %q: want at most 15 bytes matching %s", errs.InvalidConfig, b.BridgeName, NameRule)
	case !isChainName(b.AdminChainName):
		return fmt.Errorf("%w: admin chain name %q: want 1-28 of A-Z a-z 0-9 _ . -", errs.InvalidConfig, b.AdminChainName)
	case !filepath.IsAbs(b.IPAMDataDir):
		return fmt.Errorf("%w: IPAM data dir %q is not an absolute path", errs.InvalidConfig, b.IPAMDataDir)
	case b.Backend != "" && b.Backend != BackendIPTables && b.Backend != BackendNFTables:
		return fmt.Errorf("%w: backend %q: want %q or %q", errs.InvalidConfig, b.Backend, BackendIPTables, BackendNFTables)
	}
	if err := validateSubnet("IPv4", b.IPv4Subnet, false); err != nil {
		return err
	}
	if b.IPv6Subnet != "" {
		return validateSubnet("IPv6", b.IPv6Subnet, true)
	}
	return nil
}

func validateSubnet(family, cidr string, v6 bool) error {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || p.Addr().Is6() != v6 || p.Addr().Is4In6() {
		return fmt.Errorf("%w: %s subnet %q is not an %s CIDR", errs.InvalidConfig, family, cidr, family)
	}
	if p.Masked() != p {
		return fmt.Errorf("%w: %s subnet %q is not canonical, want %s", errs.InvalidConfig, family, cidr, p.Masked())
	}
	return nil
}

// The generated conflist's shape. Field order is the output order.
type (
	bridgeConfList struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []any  `json:"plugins"`
	}
	typeOnly struct {
		Type string `json:"type"`
	}
	bridgePlugin struct {
		Type          string     `json:"type"`
		Bridge        string     `json:"bridge"`
		IPMasq        bool       `json:"ipMasq"`
		IPMasqBackend string     `json:"ipMasqBackend,omitempty"`
		IsGateway     bool       `json:"isGateway"`
		ForceAddress  bool       `json:"forceAddress"`
		HairpinMode   bool       `json:"hairpinMode"`
		IPAM          bridgeIPAM `json:"ipam"`
	}
	bridgeIPAM struct {
		Type    string                `json:"type"`
		Ranges  [][]map[string]string `json:"ranges"`
		Routes  []map[string]string   `json:"routes"`
		DataDir string                `json:"dataDir"`
	}
	firewallPlugin struct {
		Type           string `json:"type"`
		Backend        string `json:"backend"`
		AdminChainName string `json:"iptablesAdminChainName"`
	}
	portmapPlugin struct {
		Type         string          `json:"type"`
		Capabilities map[string]bool `json:"capabilities"`
		SNAT         bool            `json:"snat"`
		Backend      string          `json:"backend,omitempty"`
	}
	consulPlugin struct {
		Type     string `json:"type"`
		LogLevel string `json:"log_level"`
	}
)

// BridgeConfList generates the default bridge conflist
// (cninet.BridgeConfList).
func BridgeConfList(cfg Bridge) ([]byte, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ipam := bridgeIPAM{
		Type:    "host-local",
		Ranges:  [][]map[string]string{{{"subnet": cfg.IPv4Subnet}}},
		Routes:  []map[string]string{{"dst": "0.0.0.0/0"}},
		DataDir: cfg.IPAMDataDir,
	}
	if cfg.IPv6Subnet != "" {
		ipam.Ranges = append(ipam.Ranges, []map[string]string{{"subnet": cfg.IPv6Subnet}})
		ipam.Routes = append(ipam.Routes, map[string]string{"dst": "::/0"})
	}
	nft := ""
	if cfg.Backend == BackendNFTables {
		nft = BackendNFTables
	}
	plugins := []any{
		typeOnly{Type: "loopback"},
		bridgePlugin{Type: "bridge", Bridge: cfg.BridgeName, IPMasq: true, IPMasqBackend: nft, IsGateway: true,
			ForceAddress: true, HairpinMode: cfg.HairpinMode, IPAM: ipam},
		firewallPlugin{Type: "firewall", Backend: BackendIPTables, AdminChainName: cfg.AdminChainName},
		portmapPlugin{Type: "portmap", Capabilities: map[string]bool{CapabilityPortMappings: true}, SNAT: true, Backend: nft},
	}
	if cfg.ConsulCNI {
		plugins = append(plugins, consulPlugin{Type: "consul-cni", LogLevel: "debug"})
	}
	out, err := json.MarshalIndent(bridgeConfList{CNIVersion: "1.0.0", Name: cfg.NetworkName, Plugins: plugins}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errs.InvalidConfig, err)
	}
	return append(out, '\n'), nil
}
