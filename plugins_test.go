package cninet_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

// specPlugins writes plugins that answer only VERSION, supporting the CNI
// spec versions given, into a new directory.
func specPlugins(t *testing.T, versions string, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[" + versions + "]}'\n"
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestStatusRefusesAnNFTablesBackendThePluginsCannotProvide(t *testing.T) {
	plugins := []string{"loopback", "bridge", "firewall", "portmap"}
	debianLike := `"0.4.0","1.0.0"`           // Debian's 1.1.1: no spec 1.1.0, no nftables backends
	upstreamLike := `"0.4.0","1.0.0","1.1.0"` // v1.6.1 and later
	cases := []struct {
		name, backend, versions string
		refused                 []string // plugins the error must name; none: ready
	}{
		{"nftables on plugins that predate it names bridge and portmap", cninet.BackendNFTables, debianLike, []string{"bridge", "portmap"}},
		{"nftables on plugins that have it is ready", cninet.BackendNFTables, upstreamLike, nil},
		{"iptables on old plugins is ready", cninet.BackendIPTables, debianLike, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conf, err := cninet.BridgeConfList(cninet.BridgeConfig{IPv4Subnet: "198.18.0.0/24", IPAMDataDir: t.TempDir(), Backend: tc.backend})
			if err != nil {
				t.Fatal(err)
			}
			c, err := cninet.New(cninet.Config{ConfList: conf, CNI: &fakes.CNI{}, CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables,
				PluginDirs: []string{specPlugins(t, tc.versions, plugins...)}})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Status(context.Background())
			if len(tc.refused) == 0 {
				if err != nil {
					t.Fatalf("Status = %v, want ready", err)
				}
				return
			}
			if !errors.Is(err, cninet.ErrNotReady) || !errors.Is(err, cninet.ErrInvalidConfig) {
				t.Fatalf("Status = %v, want ErrNotReady and ErrInvalidConfig", err)
			}
			for _, p := range tc.refused {
				if !strings.Contains(err.Error(), "plugin "+p+" cannot provide") {
					t.Errorf("Status does not name %s: %v", p, err)
				}
			}
			if strings.Contains(err.Error(), "plugin firewall") {
				t.Errorf("Status blames the firewall plugin, which stays on iptables: %v", err)
			}
		})
	}
}
