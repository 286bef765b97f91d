package fakes_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

// conflist is a bridge network with masquerade, firewall and portmap,
// reservations in dataDir ("" : none named).
func conflist(dataDir string) []byte {
	dir := ""
	if dataDir != "" {
		dir = `,"dataDir":"` + dataDir + `"`
	}
	return []byte(`{"cniVersion":"1.0.0","name":"net","plugins":[
		{"type":"bridge","ipMasq":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.0.0/24"}],[{"subnet":"fd00:198:18::/64"}]]` + dir + `}},
		{"type":"firewall"},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
}

func loaded(t *testing.T, f *fakes.CNI, conf []byte) *fakes.CNI {
	t.Helper()
	if err := f.Load(cni.WithConfListBytes(conf)); err != nil {
		t.Fatal(err)
	}
	return f
}

func addrs(res *cni.Result) []string {
	var out []string
	for _, c := range res.Interfaces["eth0"].IPConfigs {
		out = append(out, c.IP.String())
	}
	return out
}

func TestCNIHandsOutTheLowestFreeAddressOfEachRangeAsHostLocalDoes(t *testing.T) {
	cases := []struct {
		name    string
		dataDir bool
		setups  []string // ids, in order
		removes []string // ids removed after the setups
		next    []string // the next setup's addresses
	}{
		{"the first attachment gets .2 of each range", true, nil, nil, []string{"198.18.0.2", "fd00:198:18::2"}},
		{"the next one the next address", true, []string{"a"}, nil, []string{"198.18.0.3", "fd00:198:18::3"}},
		{"a released address is handed out again", true, []string{"a", "b"}, []string{"a"}, []string{"198.18.0.2", "fd00:198:18::2"}},
		{"without a dataDir the reservations are kept in memory", false, []string{"a"}, nil, []string{"198.18.0.3", "fd00:198:18::3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := ""
			if tc.dataDir {
				dir = t.TempDir()
			}
			f := loaded(t, &fakes.CNI{Host: fakes.NewHost()}, conflist(dir))
			ctx := context.Background()
			for _, id := range tc.setups {
				if _, err := f.Setup(ctx, id, "/var/run/netns/"+id); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range tc.removes {
				if err := f.Remove(ctx, id, "/var/run/netns/"+id); err != nil {
					t.Fatal(err)
				}
			}
			res, err := f.Setup(ctx, "next", "/var/run/netns/next")
			if err != nil {
				t.Fatal(err)
			}
			if got := addrs(res); !slices.Equal(got, tc.next) {
				t.Fatalf("addresses %v, want %v", got, tc.next)
			}
			if tc.dataDir {
				raw, err := os.ReadFile(filepath.Join(dir, "net", tc.next[0]))
				if err != nil || string(raw) != "next\r\neth0" {
					t.Fatalf("reservation %q, %v; want host-local's \"next\\r\\neth0\"", raw, err)
				}
			}
		})
	}
}

func TestCNIWritesThePluginsRulesAndItsDELTakesThemBack(t *testing.T) {
	cases := []struct {
		name         string
		leakOnRemove bool
		leftAfterDEL bool
	}{
		{"a DEL that works leaves only the shared chains", false, false},
		{"a DEL that leaks leaves everything", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, cache := fakes.NewHost(), t.TempDir()
			f := loaded(t, &fakes.CNI{Host: h, CacheDir: cache, LeakOnRemove: tc.leakOnRemove}, conflist(t.TempDir()))
			ctx := context.Background()
			ports := cni.WithCapabilityPortMap([]cni.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}})
			if _, err := f.Setup(ctx, "a", "/var/run/netns/a", ports); err != nil {
				t.Fatal(err)
			}
			fps := f.Footprints("a")
			if len(fps) != 2 || fps[0].IPv6() || !fps[1].IPv6() {
				t.Fatalf("footprints %+v, want one per family, IPv4 first", fps)
			}
			for _, fp := range fps {
				want := 4 + 5 + 2 // masquerade, DNAT with the IPv4-only hairpin rule, firewall
				if fp.IPv6() {
					want--
				}
				if left := h.Leftovers(fp); len(left) != want {
					t.Fatalf("%s: %d lines on the host, want %d: %q", fp.Addr, len(left), want, left)
				}
			}
			if _, err := os.Stat(filepath.Join(cache, "results", "net-a-eth0")); err != nil {
				t.Fatalf("no cached result: %v", err)
			}
			if err := f.Remove(ctx, "a", "/var/run/netns/a"); err != nil {
				t.Fatal(err)
			}
			if left := h.Leftovers(fps[0]); (len(left) > 0) != tc.leftAfterDEL {
				t.Errorf("after the DEL %q left, want some: %v", left, tc.leftAfterDEL)
			}
			if !h.IPv4.HasChain("nat", "CNI-HOSTPORT-DNAT") || !h.IPv4.HasChain("filter", "CNI-FORWARD") {
				t.Error("the DEL removed the shared chains")
			}
			if _, err := os.Stat(filepath.Join(cache, "results", "net-a-eth0")); os.IsNotExist(err) == tc.leftAfterDEL {
				t.Errorf("cached result after the DEL: %v, want it there: %v", err, tc.leftAfterDEL)
			}
		})
	}
}

func TestFootprintIsWhatThePluginsWrite(t *testing.T) {
	fp := fakes.Footprint{Network: "nomad", ID: "alloc-1", Addr: netip.MustParsePrefix("198.18.0.2/24"), Masquerade: true, Firewall: true,
		Ports: []cni.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}, {HostPort: 8080, ContainerPort: 80, Protocol: "udp"}, {HostPort: 9090, ContainerPort: 9090, Protocol: "tcp"}}}
	dump, err := os.ReadFile("../../testdata/iptables/bridge-dual.iptables-save")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(fp.NAT()+"\n"+fp.Filter(), "\n") {
		want := line
		if strings.HasPrefix(line, "-N ") {
			want = ":" + strings.TrimPrefix(line, "-N ") + " - [0:0]"
		}
		if !strings.Contains(string(dump), want+"\n") {
			t.Errorf("the plugins did not write %q", line)
		}
	}
}

func TestIPTablesAnswersAsTheCommandDoes(t *testing.T) {
	cases := []struct {
		name     string
		do       func(*fakes.IPTables) error
		notExist bool // the error says the rule or chain is missing
		fails    bool
	}{
		{"deleting a rule that is there", func(t *fakes.IPTables) error { return t.Delete("nat", "X", "-j", "ACCEPT") }, false, false},
		{"deleting a rule that is not", func(t *fakes.IPTables) error { return t.Delete("nat", "X", "-j", "DROP") }, true, true},
		{"listing a chain that is not there", func(t *fakes.IPTables) error { _, err := t.List("nat", "Y"); return err }, true, true},
		{"deleting a chain still jumped to", func(t *fakes.IPTables) error { return t.ClearAndDeleteChain("nat", "X") }, false, true},
		{"deleting a chain that is not there", func(t *fakes.IPTables) error { return t.ClearAndDeleteChain("nat", "Y") }, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ipt := fakes.NewIPTables().Load("nat", "-N X\n-A X -j ACCEPT\n-A POSTROUTING -j X")
			err := tc.do(ipt)
			if (err != nil) != tc.fails {
				t.Fatalf("err = %v, want failure: %v", err, tc.fails)
			}
			var e *fakes.IPTablesError
			if tc.notExist != (errors.As(err, &e) && e.IsNotExist()) {
				t.Fatalf("err = %v, want IsNotExist: %v", err, tc.notExist)
			}
		})
	}
}

func TestLinksDeletesOnlyWhatIsThere(t *testing.T) {
	l := &fakes.Links{}
	l.Add("ifb0")
	for _, tc := range []struct {
		name    string
		removed bool
	}{{"ifb0", true}, {"ifb0", false}, {"ifb1", false}} {
		if removed, err := l.DeleteLink(tc.name); err != nil || removed != tc.removed {
			t.Fatalf("DeleteLink(%s) = %v, %v; want %v", tc.name, removed, err, tc.removed)
		}
	}
	if len(l.Names()) != 0 || len(l.Calls()) != 3 {
		t.Fatalf("names %v, calls %v", l.Names(), l.Calls())
	}
}
