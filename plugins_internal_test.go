package cninet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

func TestPluginLookupIsKeptUntilAPluginDirectoryChanges(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"loopback", "bridge", "firewall", "portmap"} {
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf, err := BridgeConfList(BridgeConfig{IPv4Subnet: "198.18.0.0/24", IPAMDataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{ConfList: conf, CNI: &fakes.CNI{}, PluginDirs: []string{dir}, CacheDir: t.TempDir(), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.plugins.check(c.nets.conf); err != nil {
		t.Fatalf("all plugins present: %v", err)
	}
	if c.plugins.found[c.nets.conf.info.name].list != c.nets.conf.list {
		t.Fatal("a successful lookup was not kept")
	}
	if err := os.Remove(filepath.Join(dir, "portmap")); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour) // a coarse clock could leave the mtime as it was
	if err := os.Chtimes(dir, past, past); err != nil {
		t.Fatal(err)
	}
	if err := c.plugins.check(c.nets.conf); !errors.Is(err, ErrPluginMissing) {
		t.Fatalf("portmap removed: err = %v, want ErrPluginMissing", err)
	}
}

// twoPluginConf is a conflist of bridge (ipMasq) and portmap, each given
// the extra JSON fields.
func twoPluginConf(bridgeExtra, portmapExtra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"n","plugins":[
		{"type":"bridge","ipMasq":true%s,"ipam":{"type":"host-local","subnet":"198.18.0.0/24"}},
		{"type":"portmap","capabilities":{"portMappings":true}%s}]}`, bridgeExtra, portmapExtra))
}

func TestTheBackendAPluginUsesOnThisHost(t *testing.T) {
	noIPT := func(bool) (host.IPTables, error) {
		return nil, errors.New(`exec: "iptables": executable file not found in $PATH`)
	}
	withIPT := func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil }
	withNFT := func() (host.NFTables, error) { return &fakes.NFTables{}, nil }
	noNFT := func() (host.NFTables, error) { return nil, host.ErrNFTablesMissing }
	tests := []struct {
		name         string
		conf         []byte
		ipt          func(bool) (host.IPTables, error)
		nft          func() (host.NFTables, error)
		wantHostport bool
		wantIPTables bool
	}{
		{"no backend named, iptables here: iptables", twoPluginConf("", ""), withIPT, withNFT, false, true},
		{"no backend named, no iptables here, nft here: the plugins pick nftables", twoPluginConf("", ""), noIPT, withNFT, true, false},
		{"no backend named, neither here: iptables (and the plugins fail)", twoPluginConf("", ""), noIPT, noNFT, false, true},
		{"backend named: that one, whatever the host has", twoPluginConf(`,"ipMasqBackend":"iptables"`, `,"backend":"iptables"`), noIPT, withNFT, false, true},
		{"nftables named: nftables", twoPluginConf(`,"ipMasqBackend":"nftables"`, `,"backend":"nftables"`), withIPT, withNFT, true, false},
		{"portmap's iptables conditions imply iptables", twoPluginConf(`,"ipMasqBackend":"nftables"`, `,"conditionsV4":["-d","198.18.0.0/24"]`), noIPT, withNFT, false, true},
		{"portmap's nftables conditions imply nftables", twoPluginConf(`,"ipMasqBackend":"nftables"`, `,"conditionsV4":["ip","daddr","198.18.0.0/24"]`), withIPT, withNFT, true, false},
		{"bridge without ipMasq writes no rule", twoPluginConf(`,"ipMasq":false`, `,"backend":"nftables"`), withIPT, withNFT, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Config{ConfList: tt.conf, CNI: &fakes.CNI{}, CacheDir: t.TempDir(), StateDir: t.TempDir(),
				PluginDirs: []string{t.TempDir()}, IPTables: tt.ipt, NFTables: tt.nft})
			if err != nil {
				t.Fatal(err)
			}
			conf, err := c.nets.known("n", false)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.plugins.hostportNFT(conf); got != tt.wantHostport {
				t.Errorf("portmap on nftables = %v, want %v", got, tt.wantHostport)
			}
			if got := c.plugins.needsIPTables(conf); got != tt.wantIPTables {
				t.Errorf("needs iptables = %v, want %v", got, tt.wantIPTables)
			}
		})
	}
}

// On a host without iptables, a network whose plugins all use nftables
// there is cleaned without it: no error. One with the firewall plugin
// (iptables only) still says iptables is missing.
func TestTeardownWithoutIPTablesIsCompleteWhereNoPluginUsesIt(t *testing.T) {
	firewall := []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[
		{"type":"bridge","ipMasq":true,"ipam":{"type":"host-local","subnet":"198.18.0.0/24"}},
		{"type":"firewall"},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
	for _, tt := range []struct {
		name string
		conf []byte
		want error
	}{
		{"bridge and portmap on nftables: complete", twoPluginConf("", ""), nil},
		{"with the firewall plugin: iptables is missing", firewall, ErrIPTablesMissing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Config{ConfList: tt.conf, CNI: &fakes.CNI{}, CacheDir: t.TempDir(), StateDir: t.TempDir(), PluginDirs: []string{t.TempDir()},
				IPTables: func(bool) (host.IPTables, error) { return nil, errors.New("iptables: not found") },
				NFTables: func() (host.NFTables, error) { return &fakes.NFTables{}, nil }})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Teardown(context.Background(), &Allocation{ID: "a"}, "")
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("Teardown = %v, want %v", err, tt.want)
			}
		})
	}
}
