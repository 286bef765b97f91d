package cninet_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "conflist", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the generated conflist:\n%s", path, got)
	}
}

func TestBridgeConfListGolden(t *testing.T) {
	dual := cninet.DefaultBridgeConfig()
	dual.IPv4Subnet, dual.IPv6Subnet, dual.HairpinMode, dual.ConsulCNI = "198.18.0.0/24", "fd00:198:18::/64", true, true
	for name, cfg := range map[string]cninet.BridgeConfig{
		"default.conflist":           cninet.DefaultBridgeConfig(),
		"zero-value.conflist":        {},
		"dual-stack-consul.conflist": dual,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := cninet.BridgeConfList(cfg)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, got)
		})
	}
}

func TestBridgeConfListIPv6OnlyWhenASubnetIsSet(t *testing.T) {
	got, err := cninet.BridgeConfList(cninet.DefaultBridgeConfig())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(got, []byte("::/0")) || bytes.Contains(got, []byte("consul-cni")) {
		t.Fatalf("IPv4-only default has an IPv6 route or consul-cni:\n%s", got)
	}
	var list struct {
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(got, &list); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Type)
	}
	if strings.Join(types, ",") != "loopback,bridge,firewall,portmap" || list.Plugins[1].IPAM.DataDir != "/var/run/cni" {
		t.Fatalf("plugins %v, dataDir %q", types, list.Plugins[1].IPAM.DataDir)
	}
}

func TestBridgeConfListRejects(t *testing.T) {
	cases := map[string]func(*cninet.BridgeConfig){
		"a network name with a space":          func(c *cninet.BridgeConfig) { c.NetworkName = "my net" },
		"a bridge name longer than 15 bytes":   func(c *cninet.BridgeConfig) { c.BridgeName = "bridge-name-16ch" },
		"a bridge name with a slash":           func(c *cninet.BridgeConfig) { c.BridgeName = "a/b" },
		"an IPv4 subnet that is not canonical": func(c *cninet.BridgeConfig) { c.IPv4Subnet = "198.18.0.1/24" },
		"an IPv6 subnet in the IPv4 field":     func(c *cninet.BridgeConfig) { c.IPv4Subnet = "fd00:198:18::/64" },
		"an IPv4 subnet in the IPv6 field":     func(c *cninet.BridgeConfig) { c.IPv6Subnet = "198.18.0.0/24" },
		"an IPv6 subnet that is not canonical": func(c *cninet.BridgeConfig) { c.IPv6Subnet = "fd00:198:18::1/64" },
		"a subnet that is not a CIDR":          func(c *cninet.BridgeConfig) { c.IPv4Subnet = "198.18.0.0" },
		"an admin chain name longer than 28":   func(c *cninet.BridgeConfig) { c.AdminChainName = strings.Repeat("A", 29) },
		"an admin chain name with a space":     func(c *cninet.BridgeConfig) { c.AdminChainName = "CNI ADMIN" },
		"an admin chain name with a slash":     func(c *cninet.BridgeConfig) { c.AdminChainName = "CNI/ADMIN" },
		"an admin chain name outside ASCII":    func(c *cninet.BridgeConfig) { c.AdminChainName = "CNI-ADMÍN" },
		"an admin chain name with a newline":   func(c *cninet.BridgeConfig) { c.AdminChainName = "CNI-ADMIN\n" },
		"a relative IPAM data dir":             func(c *cninet.BridgeConfig) { c.IPAMDataDir = "run/cni" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := cninet.DefaultBridgeConfig()
			mutate(&cfg)
			if _, err := cninet.BridgeConfList(cfg); !errors.Is(err, cninet.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestBridgeConfListAcceptsAdminChainNames(t *testing.T) {
	for name, chain := range map[string]string{
		"the firewall plugin's default": "CNI-ADMIN",
		"28 bytes":                      strings.Repeat("A", 28),
		"one byte":                      "x",
		"letters, digits, underscore, dot and dashes": "a_Z.9-b",
		"starting with a dash":                        "-CNI",
	} {
		t.Run(name, func(t *testing.T) {
			cfg := cninet.DefaultBridgeConfig()
			cfg.AdminChainName = chain
			if _, err := cninet.BridgeConfList(cfg); err != nil {
				t.Fatalf("admin chain name %q: %v, want it accepted", chain, err)
			}
		})
	}
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	listA   = `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]}`
	listB   = `{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"bridge"},{"type":"portmap"}]}`
	singleC = `{"cniVersion":"1.0.0","name":"c","type":"bridge","bridge":"cni0"}`
	listA2  = `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"ptp"}]}`
)

func TestLoadConfList(t *testing.T) {
	cases := []struct {
		name     string
		files    map[string]string
		network  string
		wantType string // the first plugin's type
		wantErr  error
		errSays  []string
	}{
		{"a .conflist is found by its network name", map[string]string{"10-a.conflist": listA, "20-b.conflist": listB}, "b", "bridge", nil, nil},
		{"a single-plugin .conf is upconverted to a list", map[string]string{"30-c.conf": singleC}, "c", "bridge", nil, nil},
		{"a .json file is read too", map[string]string{"a.json": listA}, "a", "bridge", nil, nil},
		{"the lexicographically first file wins a name clash", map[string]string{"20-a.conflist": listA, "10-a.conflist": listA2}, "a", "ptp", nil, nil},
		{"other extensions are ignored", map[string]string{"a.conflist.bak": listA, "b.conflist": listB}, "a", "", cninet.ErrNetworkNotFound, []string{"found: b"}},
		{"an unrelated broken file is skipped", map[string]string{"00-broken.conflist": "{", "10-a.conflist": listA}, "a", "bridge", nil, nil},
		{"the named network's own broken file is an error naming the file", map[string]string{"a.conflist": `{"name":"a","plugins":[`}, "a", "", cninet.ErrInvalidConfig, []string{"a.conflist"}},
		{"a broken file that still shows the name is the network's own", map[string]string{"10-x.conflist": `{"name": "a", "plugins": [{}]}`}, "a", "", cninet.ErrInvalidConfig, []string{"10-x.conflist", "type"}},
		{"not found lists the names that were found", map[string]string{"a.conflist": listA, "c.conf": singleC}, "zzz", "", cninet.ErrNetworkNotFound, []string{`"zzz"`, "a, c"}},
		{"an empty directory is not found", map[string]string{}, "a", "", cninet.ErrNetworkNotFound, []string{"found: none"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			got, err := cninet.LoadConfList(dir, tc.network)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				for _, s := range tc.errSays {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var list struct {
				Name    string `json:"name"`
				Plugins []struct {
					Type string `json:"type"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal(got, &list); err != nil {
				t.Fatalf("not a conflist: %v\n%s", err, got)
			}
			if list.Name != tc.network || len(list.Plugins) == 0 || list.Plugins[0].Type != tc.wantType {
				t.Fatalf("got %s", got)
			}
		})
	}
}

func TestLoadConfListMissingDirectory(t *testing.T) {
	_, err := cninet.LoadConfList(filepath.Join(t.TempDir(), "absent"), "a")
	if err == nil {
		t.Fatal("want an error for a missing directory")
	}
}

func TestWriteConfListIsAtomicAndReadable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d")
	conf, err := cninet.BridgeConfList(cninet.DefaultBridgeConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second write replaces the first
		path, err := cninet.WriteConfList(dir, conf)
		if err != nil {
			t.Fatal(err)
		}
		if path != filepath.Join(dir, "nomad.conflist") {
			t.Fatalf("path = %s", path)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o644 {
			t.Fatalf("stat: %v, mode %v; want 0644", err, fi.Mode())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the conflist (no temp files left)", len(entries))
	}
	loaded, err := cninet.LoadConfList(dir, "nomad")
	if err != nil || !bytes.Equal(loaded, conf) {
		t.Fatalf("LoadConfList after WriteConfList: %v", err)
	}
}

func TestWriteConfListRejectsInvalidAndLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	if _, err := cninet.WriteConfList(dir, []byte(`{"name":"x"}`)); !errors.Is(err, cninet.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a rejected write left %d files", len(entries))
	}
}

func TestBridgeConfListWritesTheNFTablesBackendOnlyWhenAskedTo(t *testing.T) {
	for _, tc := range []struct {
		backend string
		want    int // occurrences of "nftables"
	}{{"", 0}, {cninet.BackendIPTables, 0}, {cninet.BackendNFTables, 2}} {
		conf, err := cninet.BridgeConfList(cninet.BridgeConfig{Backend: tc.backend})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(conf), `"nftables"`); got != tc.want {
			t.Errorf("backend %q: %d nftables fields, want %d:\n%s", tc.backend, got, tc.want, conf)
		}
		if tc.want > 0 && (!strings.Contains(string(conf), `"ipMasqBackend": "nftables"`) || !strings.Contains(string(conf), `"backend": "nftables"`)) {
			t.Errorf("backend %q: want ipMasqBackend and portmap's backend set:\n%s", tc.backend, conf)
		}
	}
	if _, err := cninet.BridgeConfList(cninet.BridgeConfig{Backend: "ebtables"}); !errors.Is(err, cninet.ErrInvalidConfig) {
		t.Errorf("an unknown backend: err = %v, want ErrInvalidConfig", err)
	}
}
