package cninet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// confExtensions are the file kinds LoadConfList reads, as libcni does.
var confExtensions = []string{".conf", ".conflist", ".json"}

// networkNameRule is the CNI rule for network names; cninet applies it to
// bridge names too.
var networkNameRule = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// LoadConfList returns the conflist of the network called name from dir.
// Files ending in .conf, .conflist and .json are read in lexicographic
// order and the first one whose network has that name wins. A single-plugin
// .conf is upconverted to a conflist. A broken file that is not the named
// network's own is skipped; when the named network's own file is broken the
// error names the file and the cause (ErrInvalidConfig). When no file has
// the name the error lists the names that were found (ErrNetworkNotFound).
func LoadConfList(dir, name string) ([]byte, error) {
	conflist, _, err := findConfList(dir, name)
	return conflist, err
}

// findConfList is LoadConfList that also returns the files it skipped, so
// that a Configurator can log them.
func findConfList(dir, name string) (conflist []byte, skipped []error, err error) {
	if name == "" {
		return nil, nil, fmt.Errorf("%w: empty network name", ErrInvalidConfig)
	}
	if _, err := os.Stat(dir); err != nil { // libcni takes a missing directory for an empty one
		return nil, nil, fmt.Errorf("%w: conflist directory: %w", ErrInvalidConfig, err)
	}
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading conflist directory %s: %w", ErrInvalidConfig, dir, err)
	}
	sort.Strings(files)
	var found []string
	for _, file := range files {
		list, err := readConfFile(file)
		if err != nil {
			if fileMayBe(file, name) {
				return nil, skipped, fmt.Errorf("%w: network %q: %s: %w", ErrInvalidConfig, name, file, err)
			}
			skipped = append(skipped, fmt.Errorf("%s: %w", file, err))
			continue
		}
		if list.Name == name {
			return list.Bytes, skipped, nil
		}
		found = append(found, list.Name)
	}
	return nil, skipped, notFoundError(dir, name, found, skipped)
}

func notFoundError(dir, name string, found []string, skipped []error) error {
	listed := "none"
	if len(found) > 0 {
		listed = strings.Join(found, ", ")
	}
	err := fmt.Errorf("%w: no network %q in %s (found: %s)", ErrNetworkNotFound, name, dir, listed)
	if len(skipped) > 0 {
		err = fmt.Errorf("%w; %d unreadable file(s) skipped: %w", err, len(skipped), errors.Join(skipped...))
	}
	return err
}

// fileMayBe reports whether a file that failed to parse could be the named
// network's own: its base name is the network name, or its (broken) JSON
// still shows the name. Only then does a broken file fail the load; anything
// else is somebody else's problem and must not break every network.
func fileMayBe(file, name string) bool {
	if strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)) == name {
		return true
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	quoted, _ := json.Marshal(name)
	return regexp.MustCompile(`"name"\s*:\s*` + regexp.QuoteMeta(string(quoted))).Match(raw)
}

// readConfFile parses one file as a conflist, upconverting a single-plugin
// config. A .conf or .json file holding a conflist is accepted as one.
func readConfFile(file string) (*libcni.NetworkConfigList, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(file, ".conflist") || hasPluginsKey(raw) {
		return parseConfList(raw)
	}
	conf, err := libcni.NetworkPluginConfFromBytes(raw)
	if err != nil {
		return nil, err
	}
	if conf.Network.Type == "" {
		return nil, errors.New(`single-plugin config has no "type"`)
	}
	// A list of the one plugin, whose conf is the file as written (not
	// re-encoded from the parsed struct, which would add every field's
	// zero value).
	list, err := json.Marshal(map[string]any{
		"name":       conf.Network.Name,
		"cniVersion": conf.Network.CNIVersion,
		"plugins":    []json.RawMessage{conf.Bytes},
	})
	if err != nil {
		return nil, err
	}
	return parseConfList(list)
}

func hasPluginsKey(raw []byte) bool {
	var probe struct {
		Plugins json.RawMessage `json:"plugins"`
	}
	return json.Unmarshal(raw, &probe) == nil && probe.Plugins != nil
}

// parseConfList parses and validates conflist bytes.
func parseConfList(raw []byte) (*libcni.NetworkConfigList, error) {
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		return nil, err
	}
	return list, validateConfList(list)
}

// validateConfList checks what libcni leaves to run time: a plugin without
// a type only fails when the first workload starts.
func validateConfList(list *libcni.NetworkConfigList) error {
	if !networkNameRule.MatchString(list.Name) {
		return fmt.Errorf("network name %q does not match %s", list.Name, networkNameRule)
	}
	if list.CNIVersion != "" {
		if _, err := version.GreaterThanOrEqualTo(list.CNIVersion, "0.1.0"); err != nil {
			return fmt.Errorf("cniVersion %q: %w", list.CNIVersion, err)
		}
	}
	if len(list.Plugins) == 0 {
		return errors.New("conflist has no plugins")
	}
	for i, p := range list.Plugins {
		if p.Network == nil || p.Network.Type == "" {
			return fmt.Errorf("plugin %d has no \"type\"", i)
		}
	}
	return nil
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
	return BridgeConfig{
		NetworkName:    "nomad",
		BridgeName:     "nomad",
		AdminChainName: "NOMAD-ADMIN",
		IPv4Subnet:     "172.26.64.0/20",
		IPAMDataDir:    "/var/run/cni",
	}
}

func (b BridgeConfig) withDefaults() BridgeConfig {
	d := DefaultBridgeConfig()
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

func (b BridgeConfig) validate() error {
	switch {
	case !networkNameRule.MatchString(b.NetworkName):
		return fmt.Errorf("%w: network name %q does not match %s", ErrInvalidConfig, b.NetworkName, networkNameRule)
	case !networkNameRule.MatchString(b.BridgeName) || len(b.BridgeName) > 15:
		return fmt.Errorf("%w: bridge name %q: want at most 15 bytes matching %s", ErrInvalidConfig, b.BridgeName, networkNameRule)
	case !isChainName(b.AdminChainName):
		return fmt.Errorf("%w: admin chain name %q: want 1-28 of A-Z a-z 0-9 _ . -", ErrInvalidConfig, b.AdminChainName)
	case !filepath.IsAbs(b.IPAMDataDir):
		return fmt.Errorf("%w: IPAM data dir %q is not an absolute path", ErrInvalidConfig, b.IPAMDataDir)
	case b.Backend != "" && b.Backend != BackendIPTables && b.Backend != BackendNFTables:
		return fmt.Errorf("%w: backend %q: want %q or %q", ErrInvalidConfig, b.Backend, BackendIPTables, BackendNFTables)
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
		return fmt.Errorf("%w: %s subnet %q is not an %s CIDR", ErrInvalidConfig, family, cidr, family)
	}
	if p.Masked() != p {
		return fmt.Errorf("%w: %s subnet %q is not canonical, want %s", ErrInvalidConfig, family, cidr, p.Masked())
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

// BridgeConfList generates the default bridge conflist (cniVersion 1.0.0):
// loopback; bridge with ipMasq and host-local IPAM; firewall (iptables
// backend, cfg.AdminChainName); portmap (portMappings capability, snat);
// and consul-cni when cfg.ConsulCNI. With cfg.Backend BackendNFTables the
// bridge's ipMasqBackend and portmap's backend say "nftables"; with the
// default, neither field is written, which every plugin release reads as
// iptables. An invalid cfg is an ErrInvalidConfig
// error naming the field.
func BridgeConfList(cfg BridgeConfig) ([]byte, error) {
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
		portmapPlugin{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}, SNAT: true, Backend: nft},
	}
	if cfg.ConsulCNI {
		plugins = append(plugins, consulPlugin{Type: "consul-cni", LogLevel: "debug"})
	}
	out, err := json.MarshalIndent(bridgeConfList{CNIVersion: "1.0.0", Name: cfg.NetworkName, Plugins: plugins}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return append(out, '\n'), nil
}

// WriteConfList validates conflist and writes it atomically to
// dir/<name>.conflist with mode 0644, creating dir if needed: the bytes go
// to a temporary file in dir, are synced, and replace the target by rename,
// so a reader (or a crash) never sees a half-written file. An invalid
// conflist is an ErrInvalidConfig error and writes nothing; a file system
// failure is an ErrIO error wrapping the cause, and leaves no temporary
// file behind.
func WriteConfList(dir string, conflist []byte) (path string, err error) {
	list, err := parseConfList(conflist)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	path = filepath.Join(dir, list.Name+".conflist")
	if err := writeAtomically(dir, path, conflist); err != nil {
		return "", fmt.Errorf("%w: writing conflist %s: %w", ErrIO, path, err)
	}
	return path, nil
}

func writeAtomically(dir, path string, data []byte) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	syncDir(dir)
	return nil
}

// syncDir makes the rename durable; failure only weakens crash safety, so
// it is not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// networkInfo is what the operations and the cleanup need to know about a
// loaded conflist.
type networkInfo struct {
	name         string
	footprint    footprint.Network // where its attachments' state is (no interface names yet)
	disableCheck bool
	disableGC    bool
	pluginTypes  []string
	portMappings bool              // a plugin declares the portMappings capability
	capabilities map[string]bool   // every capability a plugin declares
	netfilter    []netfilterPlugin // the plugins that write firewall rules
	noIPAM       bool              // no plugin names an IPAM plugin: an L2-only network
}

func newNetworkInfo(list *libcni.NetworkConfigList) networkInfo {
	info := networkInfo{name: list.Name, disableCheck: list.DisableCheck, disableGC: list.DisableGC, noIPAM: true}
	plugins := make([]footprint.Plugin, len(list.Plugins))
	for i, p := range list.Plugins {
		info.noIPAM = info.noIPAM && p.Network.IPAM.Type == ""
		info.pluginTypes = append(info.pluginTypes, p.Network.Type)
		info.portMappings = info.portMappings || p.Network.Capabilities["portMappings"]
		for name, on := range p.Network.Capabilities {
			if on {
				if info.capabilities == nil {
					info.capabilities = map[string]bool{}
				}
				info.capabilities[name] = true
			}
		}
		plugins[i] = footprint.Plugin{Type: p.Network.Type, Bytes: p.Bytes}
	}
	info.footprint = footprint.NetworkOf(list.Name, plugins)
	info.netfilter = netfilterPlugins(list)
	return info
}
