package cninettest

import (
	"net/netip"
	"os"
	"path/filepath"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

// Network and Subnet are the network of New's Config: a bridge network
// with masquerade, firewall and portmap, as DefaultBridgeConfig makes
// it, on a range set aside for benchmarking (RFC 2544) that no host
// routes.
const (
	Network = "cninettest"
	Subnet  = "198.18.0.0/24"
)

// Env is a fake host, a fake CNI that acts on it as the plugins of
// Config's network would, and a Config wired to both: a Configurator
// made from it reaches the host through none of its seams and writes
// only under New's directory, so it needs neither root nor plugins (its
// plugin directory holds stand-ins that only answer Status's questions).
type Env struct {
	// Config is ready for cninet.New: change any field before.
	Config cninet.Config
	Host   *fakes.Host
	CNI    *fakes.CNI

	ipamDir string
}

// New returns an Env whose files all go under dir (a test's t.TempDir()):
// libcni's cache (Config.CacheDir), the host registry
// (Config.StateDir), host-local's reservations and the stand-in plugins
// (Config.PluginDirs). Config's logger is
// the null logger; its owner is "cninettest".
func New(dir string) (*Env, error) {
	bridge := cninet.DefaultBridgeConfig()
	bridge.NetworkName, bridge.BridgeName = Network, Network
	bridge.IPv4Subnet, bridge.IPAMDataDir = Subnet, filepath.Join(dir, "ipam")
	conf, err := cninet.BridgeConfList(bridge)
	if err != nil {
		return nil, err
	}
	plugins := filepath.Join(dir, "plugins")
	if err := writeStandIns(plugins); err != nil {
		return nil, err
	}
	h := fakes.NewHost()
	fake := &fakes.CNI{Host: h, CacheDir: filepath.Join(dir, "cache")}
	return &Env{Host: h, CNI: fake, ipamDir: bridge.IPAMDataDir, Config: cninet.Config{
		ConfList:   conf,
		CNI:        fake,
		IPTables:   h.IPTables,
		NFTables:   h.NFTables,
		Links:      h.Links,
		CacheDir:   fake.CacheDir,
		StateDir:   filepath.Join(dir, "state"),
		PluginDirs: []string{plugins},
		Owner:      "cninettest",
	}}, nil
}

// standIn is what a plugin binary of Network's conflist is in New's
// plugin directory: Configurator.Status looks for each plugin and asks
// it VERSION (and STATUS), while the fake CNI does what ADD, DEL and
// CHECK would. Anything else fails, saying so.
const standIn = `#!/bin/sh
# A stand-in for a CNI plugin, written by cninettest.New: it answers
# VERSION and STATUS; cninettest's fake CNI does the plugin's work.
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}' ;;
STATUS) ;;
*) echo '{"cniVersion":"1.1.0","code":4,"msg":"cninettest: a stand-in plugin answers only VERSION and STATUS"}'; exit 1 ;;
esac
`

// writeStandIns writes a stand-in for each plugin of Network's conflist
// into dir.
func writeStandIns(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, plugin := range []string{"loopback", "bridge", "firewall", "portmap"} {
		if err := os.WriteFile(filepath.Join(dir, plugin), []byte(standIn), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// Reservations returns the addresses host-local holds on Network, in
// the order of their names.
func (e *Env) Reservations() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(e.ipamDir, Network))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, entry := range entries {
		if _, err := netip.ParseAddr(entry.Name()); err == nil { // not lock, last_reserved_ip.N
			addrs = append(addrs, entry.Name())
		}
	}
	return addrs, nil
}
