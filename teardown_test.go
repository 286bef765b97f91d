package cninet_test

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// footprint is what the bridge, portmap and firewall plugins and
// host-local leave for one attachment: masquerade, port 8080 to 80 and
// the firewall's rules, in the plugins' exact formats.
type footprint struct {
	network, id, ip string // ip without prefix length
	v6              bool
}

func chain(prefix, network, id string) string {
	sum := sha512.Sum512([]byte(network + id))
	return (prefix + hex.EncodeToString(sum[:]))[:28]
}

func (f footprint) plugins() fakes.Footprint {
	bits := 24
	if f.v6 {
		bits = 64
	}
	return fakes.Footprint{Network: f.network, ID: f.id, Addr: netip.PrefixFrom(netip.MustParseAddr(f.ip), bits),
		Masquerade: true, Firewall: true, Ports: []cni.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}}
}

func (f footprint) nat() string    { return f.plugins().NAT() }
func (f footprint) filter() string { return f.plugins().Filter() }

var (
	sharedNat    = fakes.SharedNAT
	sharedFilter = fakes.SharedFilter("")
)

// cleanupFixture is a Configurator over fakes whose conflist keeps
// reservations in a temporary directory.
type cleanupFixture struct {
	fixture
	network, ipamDir, cacheDir, stateDir string
	conf                                 []byte
	mode                                 listingMode
}

// newCleanupFixture builds the fixture; with batching its iptables also
// lists whole tables and restores in batches, like the host's.
func newCleanupFixture(t *testing.T, network string, mode ...listingMode) cleanupFixture {
	t.Helper()
	m := chainByChain
	if len(mode) > 0 {
		m = mode[0]
	}
	shared := func(ipt *fakes.IPTables) { ipt.Load("nat", sharedNat).Load("filter", sharedFilter) }
	return newFixtureWithTables(t, network, m, shared, shared)
}

// newFixtureWithTables builds the fixture with iptables and ip6tables
// filled by load4 and load6.
func newFixtureWithTables(t *testing.T, network string, mode listingMode, load4, load6 func(*fakes.IPTables)) cleanupFixture {
	t.Helper()
	dataDir := t.TempDir()
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName, cfg.IPv4Subnet, cfg.IPv6Subnet, cfg.IPAMDataDir = network, "198.18.0.0/24", "fd00:198:18::/64", dataDir
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{cni: &fakes.CNI{}, v4: fakes.NewIPTables(), v6: fakes.NewIPTables()}
	load4(f.v4)
	load6(f.v6)
	cf := cleanupFixture{fixture: f, network: network, ipamDir: filepath.Join(dataDir, network),
		cacheDir: t.TempDir(), stateDir: t.TempDir(), conf: conf, mode: mode}
	cf.c = cf.configurator(t, "")
	if err := os.MkdirAll(cf.ipamDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return cf
}

// configurator returns another Configurator of owner ("": the default)
// on the fixture's host: the same fakes, cache and host registry, as a
// second process on the same host has.
func (cf cleanupFixture) configurator(t *testing.T, owner string) *cninet.Configurator {
	t.Helper()
	c, err := cninet.New(cninet.Config{CacheDir: cf.cacheDir, StateDir: cf.stateDir, Owner: owner, NFTables: noNFTables, ConfList: cf.conf, CNI: cf.cni,
		IPTables: func(v6 bool) (host.IPTables, error) {
			ipt := cf.v4
			if v6 {
				ipt = cf.v6
			}
			return cf.mode.wrap(ipt), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (cf cleanupFixture) leak(t *testing.T, fp footprint) {
	t.Helper()
	ipt := cf.v4
	if fp.v6 {
		ipt = cf.v6
	}
	ipt.Load("nat", fp.nat()).Load("filter", fp.filter())
	if fp.network == cf.network {
		cf.reserve(t, fp.ip, fp.id)
	}
}

func (cf cleanupFixture) reserve(t *testing.T, ip, id string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(cf.ipamDir, ip), []byte(id+"\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (cf cleanupFixture) teardown(t *testing.T, id string) error {
	t.Helper()
	return cf.c.Teardown(context.Background(), &cninet.Allocation{ID: id}, "")
}

func (cf cleanupFixture) state() string {
	return cf.v4.Save("nat") + cf.v4.Save("filter") + cf.v6.Save("nat") + cf.v6.Save("filter")
}

func (cf cleanupFixture) reservations(t *testing.T) []string {
	entries, err := os.ReadDir(cf.ipamDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// listingMode is how the fake iptables can be listed: chain by chain (the
// IPTables interface alone), table by table with batched restores, all
// tables at once (iptables-save), as the host's default IPTables does on
// the legacy backend, or with chains and rules also probed without a
// listing, as it does on the nf_tables backend.
type listingMode int

const (
	chainByChain listingMode = iota
	tableByTable
	allTables
	probed
)

func (m listingMode) String() string {
	return [...]string{"chain by chain", "table by table", "all tables at once", "probed over netlink"}[m]
}

func (m listingMode) wrap(ipt *fakes.IPTables) host.IPTables {
	switch m {
	case tableByTable:
		return &fakes.Batching{IPTables: ipt}
	case allTables:
		return fakes.Saving{Batching: &fakes.Batching{IPTables: ipt}}
	case probed:
		return fakes.NewProbing(ipt)
	}
	return ipt
}

// eachListingMode runs a test in every listing mode.
func eachListingMode(t *testing.T, test func(t *testing.T, mode listingMode)) {
	for _, m := range []listingMode{chainByChain, tableByTable, allTables, probed} {
		t.Run(m.String(), func(t *testing.T) { test(t, m) })
	}
}

func TestTeardownRemovesTheWholeFootprintForBothFamilies(t *testing.T) {
	eachListingMode(t, testTeardownRemovesTheWholeFootprint)
}

func testTeardownRemovesTheWholeFootprint(t *testing.T, whole listingMode) {
	cf := newCleanupFixture(t, "nomad", whole)
	before := cf.state()
	cf.leak(t, footprint{network: "nomad", id: "alloc-1", ip: "198.18.0.2"})
	cf.leak(t, footprint{network: "nomad", id: "alloc-1", ip: "fd00:198:18::2", v6: true})
	if err := cf.teardown(t, "alloc-1"); err != nil {
		t.Fatal(err)
	}
	if after := cf.state(); after != before {
		t.Fatalf("left behind:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if r := cf.reservations(t); len(r) != 1 || r[0] != "lock" {
		t.Fatalf("reservations left: %v", r)
	}
}

func TestTeardownTouchesOnlyWhatTheAttachmentOwns(t *testing.T) {
	cases := []struct {
		name    string
		network string
		target  string
		others  []footprint
	}{
		{"an id that is a prefix of another id", "nomad", "alloc-1",
			[]footprint{{network: "nomad", id: "alloc-10", ip: "198.18.0.3"}, {network: "nomad", id: "alloc-1x", ip: "198.18.0.4"}}},
		{"an id that extends another id", "nomad", "alloc-10",
			[]footprint{{network: "nomad", id: "alloc-1", ip: "198.18.0.3"}}},
		{"the same id on another network", "nomad", "alloc-1",
			[]footprint{{network: "nomad2", id: "alloc-1", ip: "198.18.1.2"}, {network: "nomadx", id: "alloc-1", ip: "198.18.1.3"}}},
		{"a network name with regex metacharacters", "my.net", "a.b",
			[]footprint{{network: "myXnet", id: "a.b", ip: "198.18.0.3"}, {network: "my.net", id: "aXb", ip: "198.18.0.4"}}},
		{"comments cut by portmap at 255 characters", strings.Repeat("n", 100), strings.Repeat("i", 150) + "a",
			[]footprint{{network: strings.Repeat("n", 100), id: strings.Repeat("i", 150) + "b", ip: "198.18.0.3"},
				{network: strings.Repeat("n", 100), id: strings.Repeat("i", 150) + "aa", ip: "198.18.0.4"}}},
	}
	for _, tc := range cases {
		eachListingMode(t, func(t *testing.T, whole listingMode) {
			t.Run(tc.name, func(t *testing.T) { testOwnership(t, whole, tc.network, tc.target, tc.others) })
		})
	}
}

func testOwnership(t *testing.T, whole listingMode, network, target string, others []footprint) {
	cf := newCleanupFixture(t, network, whole)
	for _, o := range others {
		cf.leak(t, o)
	}
	before := cf.state()
	cf.leak(t, footprint{network: network, id: target, ip: "198.18.0.2"})
	if err := cf.teardown(t, target); err != nil {
		t.Fatal(err)
	}
	if after := cf.state(); after != before {
		t.Fatalf("want exactly the others' rules left\nwant:\n%s\ngot:\n%s", before, after)
	}
}

func TestTeardownKeepsFirewallRulesOfAnAddressHandedToANewWorkload(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	old := footprint{network: "nomad", id: "old", ip: "198.18.0.2"}
	cf.v4.Load("nat", old.nat()) // the old attachment's masquerade rule proves it held .2 ...
	cf.reserve(t, "198.18.0.2", "new")
	cf.v4.Load("filter", old.filter()) // ... but the new one holds .2 now, with identical firewall rules
	if err := cf.teardown(t, "old"); err != nil {
		t.Fatal(err)
	}
	if n := len(cf.v4.Rules("filter", "CNI-FORWARD")); n != 3 {
		t.Fatalf("CNI-FORWARD has %d rules, want the admin jump and the new workload's 2", n)
	}
	if cf.v4.HasChain("nat", chain("CNI-", "nomad", "old")) {
		t.Fatal("the old attachment's masquerade chain is still there")
	}
}

func TestTeardownWithoutProofOfTheAddressLeavesFirewallRulesAlone(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.v4.Load("filter", footprint{network: "nomad", id: "x", ip: "198.18.0.9"}.filter())
	before := cf.state()
	if err := cf.teardown(t, "x"); err != nil {
		t.Fatal(err)
	}
	if cf.state() != before {
		t.Fatal("firewall rules were deleted although nothing proved the attachment held the address")
	}
}

func TestTeardownIsIdempotentAndQuietWhenNothingIsLeft(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
	for i := 0; i < 2; i++ {
		if err := cf.teardown(t, "a"); err != nil {
			t.Fatalf("teardown %d: %v", i+1, err)
		}
	}
	if n := cf.v4.Count("Delete") + cf.v4.Count("ClearAndDeleteChain"); n != 4+2 {
		t.Fatalf("%d deletions, want 4 rules and 2 chains, all in the first teardown", n)
	}
	if err := cf.teardown(t, "never-set-up"); err != nil {
		t.Fatalf("teardown of what was never set up: %v", err)
	}
}

func TestTeardownListsEachChainOnce(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
	cf.leak(t, footprint{network: "nomad", id: "b", ip: "198.18.0.3"})
	if err := cf.teardown(t, "a"); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, c := range cf.v4.Calls() {
		if strings.HasPrefix(c, "List ") {
			seen[c]++
		}
	}
	for call, n := range seen {
		if n > 1 {
			t.Errorf("%s ran %d times", call, n)
		}
	}
	if len(seen) == 0 {
		t.Fatal("nothing was listed")
	}
}

func TestTeardownWithNothingLeftListsNoChainWhereChainsCanBeProbed(t *testing.T) {
	cases := []struct {
		name      string
		leak      bool  // the DEL left the whole footprint behind
		failProbe error // the probes fail
		listed    bool  // so chains must be listed after all
	}{
		{name: "nothing left: only the three derived chains and CNI-FORWARD are probed, nothing listed"},
		{name: "everything left: it is found and removed", leak: true, listed: true},
		{name: "probes that fail fall back to listing", failProbe: errors.New("netlink: permission denied"), listed: true},
		{name: "probes that fail still find and remove everything left", leak: true, failProbe: errors.New("netlink: permission denied"), listed: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cf := newCleanupFixture(t, "nomad", probed)
			before := cf.state()
			if tc.leak {
				cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
			} else {
				cf.reserve(t, "198.18.0.2", "a") // the address is proven: CNI-FORWARD must be looked at
			}
			cf.c = reopenProbing(t, cf, tc.failProbe)
			if err := cf.teardown(t, "a"); err != nil {
				t.Fatal(err)
			}
			if after := cf.state(); after != before {
				t.Fatalf("left behind:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			var listings, probes []string
			for _, call := range append(cf.v4.Calls(), cf.v6.Calls()...) {
				switch strings.SplitN(call, " ", 2)[0] {
				case "List", "ListTable", "SaveAll":
					listings = append(listings, call)
				case "ProbeChain", "MayMention":
					probes = append(probes, call)
				}
			}
			if tc.listed != (len(listings) > 0) {
				t.Errorf("listings %q, want some: %v", listings, tc.listed)
			}
			// Three chains per family; CNI-FORWARD where an address is proven (IPv4).
			if want := 2*3 + 1; tc.failProbe == nil && !tc.leak && len(probes) != want {
				t.Errorf("probes %q, want %d", probes, want)
			}
		})
	}
}

// reopenProbing returns a Configurator on cf's fakes whose probes fail
// with failProbe.
func reopenProbing(t *testing.T, cf cleanupFixture, failProbe error) *cninet.Configurator {
	t.Helper()
	c, err := cninet.New(cninet.Config{CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables, ConfList: cf.c.ConfList(), CNI: cf.cni,
		IPTables: func(v6 bool) (host.IPTables, error) {
			ipt := cf.v4
			if v6 {
				ipt = cf.v6
			}
			return fakes.NewProbing(ipt).FailingWith(failProbe), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTeardownRunsEveryStepAndReportsEachFailure(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
	cf.v4.FailDelete["nat/POSTROUTING"] = errors.New("iptables: Resource temporarily unavailable (exit status 4)")
	cf.v4.FailList["nat/CNI-HOSTPORT-DNAT"] = errors.New("iptables: lock held (exit status 4)")
	err := cf.teardown(t, "a")
	if !errors.Is(err, cninet.ErrCleanupFailed) {
		t.Fatalf("err = %v, want ErrCleanupFailed", err)
	}
	for _, s := range []string{"POSTROUTING", "CNI-HOSTPORT-DNAT"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not mention %s: %v", s, err)
		}
	}
	if r := cf.reservations(t); len(r) != 1 {
		t.Errorf("reservation not removed: %v", r)
	}
	if len(cf.v4.Rules("filter", "CNI-FORWARD")) != 1 {
		t.Error("firewall rules not removed")
	}
}

func TestTeardownWithoutIPTablesStillRunsDELAndSaysIPTablesIsMissing(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.reserve(t, "198.18.0.2", "a")
	c, err := cninet.New(cninet.Config{CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables, ConfList: cf.c.ConfList(), CNI: cf.cni, IPTables: func(bool) (host.IPTables, error) {
		return nil, errors.New(`exec: "iptables": executable file not found in $PATH`)
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Teardown(context.Background(), &cninet.Allocation{ID: "a"}, "")
	if !errors.Is(err, cninet.ErrIPTablesMissing) {
		t.Fatalf("err = %v, want ErrIPTablesMissing", err)
	}
	if got := attachVerbs(cf.cni); got != "Remove" {
		t.Fatalf("calls = %q, want the DEL", got)
	}
	if r := cf.reservations(t); len(r) != 1 {
		t.Fatalf("reservation not removed: %v", r)
	}
}

// TestTeardownOnRealPluginRules replays what the plugins really wrote for
// two attachments (testdata/iptables) and tears one down as if its DEL
// never ran: exactly its rules, chains and files must go.
func TestTeardownOnRealPluginRules(t *testing.T) {
	dump4, err := os.ReadFile("testdata/iptables/bridge-dual.iptables-save")
	if err != nil {
		t.Fatal(err)
	}
	dump6, err := os.ReadFile("testdata/iptables/bridge-dual.ip6tables-save")
	if err != nil {
		t.Fatal(err)
	}
	eachListingMode(t, func(t *testing.T, mode listingMode) {
		cf := newFixtureWithTables(t, "nomad", mode,
			func(ipt *fakes.IPTables) { ipt.LoadSave(string(dump4)) },
			func(ipt *fakes.IPTables) { ipt.LoadSave(string(dump6)) })
		for _, r := range [][2]string{{"198.18.0.2", "alloc-1"}, {"fd00:198:18::2", "alloc-1"}, {"198.18.0.3", "alloc-10"}, {"fd00:198:18::3", "alloc-10"}} {
			cf.reserve(t, r[0], r[1])
		}
		if err := cf.teardown(t, "alloc-1"); err != nil {
			t.Fatal(err)
		}
		gone := []string{`id: \"alloc-1\"`, chain("CNI-", "nomad", "alloc-1"), chain("CNI-DN-", "nomad", "alloc-1"), "198.18.0.2/", "fd00:198:18::2/", "198.18.0.2:", "[fd00:198:18::2]:"}
		for _, pair := range []struct {
			family string
			before []byte
			ipt    *fakes.IPTables
		}{{"iptables", dump4, cf.v4}, {"ip6tables", dump6, cf.v6}} {
			after := pair.ipt.Save("nat") + pair.ipt.Save("filter")
			for _, g := range gone {
				if strings.Contains(after, g) {
					t.Errorf("%s: %q is still there:\n%s", pair.family, g, after)
				}
			}
			if want, got := keptLines(string(pair.before), gone), len(strings.Split(strings.TrimSpace(after), "\n")); got != want {
				t.Errorf("%s: %d lines left, want %d (everything not alloc-1's)\n%s", pair.family, got, want, after)
			}
		}
		if r := cf.reservations(t); strings.Join(r, ",") != "198.18.0.3,fd00:198:18::3,lock" {
			t.Errorf("reservations left: %v", r)
		}
	})
}

// keptLines counts the -N/-P and -A lines of a dump, in Save's form, that
// mention none of gone.
func keptLines(dump string, gone []string) int {
	n := 0
	for _, line := range strings.Split(dump, "\n") {
		if !strings.HasPrefix(line, "-A ") && !strings.HasPrefix(line, ":") {
			continue
		}
		keep := true
		for _, g := range gone {
			if strings.Contains(line, g) {
				keep = false
			}
		}
		if keep {
			n++
		}
	}
	return n
}

// TestTeardownOnRealCutComments replays the plugins' rules for network and
// ids so long that iptables cut their comments (testdata/iptables): in
// "toolong" both attachments' comments are identical, and only the jump
// targets, derived from the whole id, tell them apart.
func TestTeardownOnRealCutComments(t *testing.T) {
	for _, tc := range []struct {
		capture, network string
		id1, id10        string
	}{
		{"longname", strings.Repeat("n", 120), strings.Repeat("a", 119) + "1", strings.Repeat("a", 119) + "10"},
		{"toolong", strings.Repeat("n", 124), strings.Repeat("a", 120) + "1", strings.Repeat("a", 120) + "10"},
		{"dotname", "my.net", "alloc-1", "alloc-10"},
	} {
		t.Run(tc.capture, func(t *testing.T) {
			nat, err1 := os.ReadFile("testdata/iptables/" + tc.capture + "-nat-ipv4.txt")
			filter, err2 := os.ReadFile("testdata/iptables/" + tc.capture + "-filter-ipv4.txt")
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			eachListingMode(t, func(t *testing.T, mode listingMode) {
				cf := newFixtureWithTables(t, tc.network, mode,
					func(ipt *fakes.IPTables) { ipt.Load("nat", string(nat)).Load("filter", string(filter)) },
					func(*fakes.IPTables) {})
				cf.reserve(t, "198.18.0.2", tc.id1)
				cf.reserve(t, "198.18.0.3", tc.id10)
				if err := cf.teardown(t, tc.id1); err != nil {
					t.Fatal(err)
				}
				after := cf.v4.Save("nat") + cf.v4.Save("filter")
				for _, gone := range []string{chain("CNI-", tc.network, tc.id1), chain("CNI-DN-", tc.network, tc.id1), "198.18.0.2/32", "198.18.0.2:"} {
					if strings.Contains(after, gone) {
						t.Errorf("%s still there:\n%s", gone, after)
					}
				}
				for _, kept := range []string{chain("CNI-", tc.network, tc.id10), chain("CNI-DN-", tc.network, tc.id10), "-s 198.18.0.3/32 -j ACCEPT"} {
					if !strings.Contains(after, kept) {
						t.Errorf("%s (the other attachment's) is gone:\n%s", kept, after)
					}
				}
			})
		})
	}
}

func TestTeardownAfterCloseStillCleansUp(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
	if err := cf.c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cf.teardown(t, "a"); err != nil {
		t.Fatal(err)
	}
	if cf.v4.HasChain("nat", chain("CNI-", "nomad", "a")) || len(cf.reservations(t)) != 1 {
		t.Fatal("Teardown after Close left the attachment's state")
	}
}

// cache writes libcni's cached result of (network, id) on eth0 naming ip.
func (cf cleanupFixture) cache(t *testing.T, network, id, ip string) string {
	t.Helper()
	return cf.writeCache(t, network, id, ip, "cniCacheV1")
}

// sweepOnlyCache writes a cached result that libcni's own GC passes over
// (its kind is not libcni's): unit tests have no plugins for its DEL to
// run, and what is under test is the sweep.
func (cf cleanupFixture) sweepOnlyCache(t *testing.T, network, id, ip string) string {
	t.Helper()
	return cf.writeCache(t, network, id, ip, "")
}

func (cf cleanupFixture) writeCache(t *testing.T, network, id, ip, kind string) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{
		"kind": kind, "containerId": id, "networkName": network, "ifName": "eth0",
		"config": []byte(`{}`),
		"result": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]string{{"address": ip + "/24"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cf.cacheDir, "results", network+"-"+id+"-eth0")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// firewallDEL makes the fake's DEL do what the firewall plugin's does:
// delete the CNI-FORWARD rules of every address the cached result names
// when the DEL runs (libcni hands it over as prevResult). after, if set,
// runs right after those deletions, before anything else can repair them.
func (cf cleanupFixture) firewallDEL(t *testing.T, after func()) {
	cf.cni.RemoveHook = func(_ context.Context, id string) error {
		raw, err := os.ReadFile(filepath.Join(cf.cacheDir, "results", cf.network+"-"+id+"-eth0"))
		if err != nil {
			return err
		}
		var cached struct {
			Result struct {
				IPs []struct{ Address string } `json:"ips"`
			} `json:"result"`
		}
		if err := json.Unmarshal(raw, &cached); err != nil {
			return err
		}
		defer func() {
			if after != nil {
				after()
			}
		}()
		for _, c := range cached.Result.IPs {
			ip, _, _ := strings.Cut(c.Address, "/")
			fp := footprint{network: cf.network, ip: ip}
			for _, line := range strings.Split(fp.filter(), "\n") {
				spec := strings.Fields(strings.TrimPrefix(line, "-A CNI-FORWARD "))
				if err := cf.v4.Delete("filter", "CNI-FORWARD", spec...); err != nil {
					var fe *fakes.IPTablesError
					if !errors.As(err, &fe) || !fe.NotExist {
						return err
					}
				}
			}
		}
		return nil
	}
}

func forwardRules(cf cleanupFixture) int { return len(cf.v4.Rules("filter", "CNI-FORWARD")) }

// A reboot wiped host-local's reservations (tmpfs) but kept libcni's
// cache (disk); a new workload was given the old one's address. The
// firewall plugin's DEL of the old attachment deletes by the addresses of
// the cached result: it must never see that one, so the new workload's
// rules are there at every instant, right after the DEL too.
func TestTeardownOfAStaleAttachmentNeverTouchesTheFirewallRulesOfTheAddressesNewHolder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder func(t *testing.T, cf cleanupFixture)
	}{
		{"the new holder has host-local's reservation", func(t *testing.T, cf cleanupFixture) { cf.reserve(t, "198.18.0.2", "new") }},
		{"the new holder has a cached result (static IPAM)", func(t *testing.T, cf cleanupFixture) { cf.cache(t, "nomad", "new", "198.18.0.2") }},
		{"the new holder has a masquerade rule", func(t *testing.T, cf cleanupFixture) {
			cf.v4.Load("nat", footprint{network: "nomad", id: "new", ip: "198.18.0.2"}.nat())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachListingMode(t, func(t *testing.T, mode listingMode) {
				cf := newCleanupFixture(t, "nomad", mode)
				cf.cache(t, "nomad", "old", "198.18.0.2") // stale: from before the reboot
				tc.holder(t, cf)
				cf.v4.Load("filter", footprint{network: "nomad", ip: "198.18.0.2"}.filter()) // the new workload's
				atDEL := -1
				cf.firewallDEL(t, func() { atDEL = forwardRules(cf) })
				if err := cf.teardown(t, "old"); err != nil {
					t.Fatal(err)
				}
				if atDEL != 3 {
					t.Errorf("right after the DEL CNI-FORWARD had %d rules, want the admin jump and the new workload's 2", atDEL)
				}
				if n := forwardRules(cf); n != 3 {
					t.Fatalf("CNI-FORWARD has %d rules, want the admin jump and the new workload's 2: %q", n, cf.v4.Rules("filter", "CNI-FORWARD"))
				}
				if _, err := os.Stat(filepath.Join(cf.cacheDir, "results", "nomad-old-eth0")); !os.IsNotExist(err) {
					t.Errorf("the old attachment's cached result is still there: %v", err)
				}
			})
		})
	}
}

// Without a holder, the rules the DEL left are the attachment's and go.
func TestTeardownRemovesTheFirewallRulesOfAnAddressNobodyElseHolds(t *testing.T) {
	cf := newCleanupFixture(t, "nomad", probed)
	cf.cache(t, "nomad", "old", "198.18.0.2")
	cf.v4.Load("filter", footprint{network: "nomad", ip: "198.18.0.2"}.filter())
	if err := cf.teardown(t, "old"); err != nil { // the fake DEL leaves them
		t.Fatal(err)
	}
	if n := forwardRules(cf); n != 1 {
		t.Fatalf("CNI-FORWARD has %d rules, want only the admin jump", n)
	}
}

// When nftables is there but cannot be read, what portmap's nftables DEL
// would take from others is unknown: the DEL is withheld and the error
// says so; the force cleanup still runs.
func TestTeardownWithholdsTheDELWhenItsGuardCannotReadNFTables(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
	broken := errors.New("netlink: permission denied")
	c, err := cninet.New(cninet.Config{CacheDir: cf.cacheDir, StateDir: t.TempDir(), ConfList: cf.c.ConfList(), CNI: cf.cni,
		NFTables: func() (host.NFTables, error) { return nil, broken },
		IPTables: func(v6 bool) (host.IPTables, error) {
			if v6 {
				return cf.v6, nil
			}
			return cf.v4, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Teardown(context.Background(), &cninet.Allocation{ID: "a"}, "")
	if !errors.Is(err, cninet.ErrCleanupFailed) || !errors.Is(err, broken) || !strings.Contains(err.Error(), "DEL withheld") {
		t.Fatalf("Teardown error = %v, want ErrCleanupFailed saying the DEL was withheld, wrapping the cause", err)
	}
	if verbs := strings.Join(cf.cni.Verbs(), ","); strings.Contains(verbs, "Remove") {
		t.Errorf("the DEL ran: %s", verbs)
	}
	if cf.v4.HasChain("nat", chain("CNI-", "nomad", "a")) {
		t.Error("the force cleanup did not run")
	}
}

// A runner killed while libcni wrote its cache leaves the file empty; the
// reservation still proves the address, and the firewall rules the DEL
// could not find go.
func TestTeardownWithAnEmptyCacheFileStillRemovesTheFirewallRulesTheReservationProves(t *testing.T) {
	cf := newCleanupFixture(t, "nomad", probed)
	path := cf.cache(t, "nomad", "a", "198.18.0.2")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cf.reserve(t, "198.18.0.2", "a")
	cf.v4.Load("filter", footprint{network: "nomad", ip: "198.18.0.2"}.filter())
	if err := cf.teardown(t, "a"); err != nil {
		t.Fatal(err)
	}
	if n := forwardRules(cf); n != 1 {
		t.Fatalf("CNI-FORWARD has %d rules, want only the admin jump", n)
	}
	if names := cf.reservations(t); len(names) != 1 { // lock
		t.Errorf("reservations left: %v", names)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the empty cache file is still there: %v", err)
	}
}

// lockingIPTables is fake iptables that can be bound to a context, as the
// host's can, and stands in for another process holding the xtables lock:
// while held, every command of a bound copy fails as the host's does,
// either at once (iptables' own wait ran out) or, with block, when its
// context ends. It records every context it is bound to.
type lockingIPTables struct {
	*fakes.IPTables
	held  bool
	block bool
	// missed is how many commands, from now, still find the lock held,
	// each failing at once as when iptables' wait ran out: a busy host
	// whose other writer holds the lock in bursts.
	missed atomic.Int32
	mu     sync.Mutex
	bound  []context.Context
}

func (l *lockingIPTables) WithContext(ctx context.Context) host.IPTables {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bound = append(l.bound, ctx)
	return boundIPTables{l, ctx}
}

func (l *lockingIPTables) contexts() []context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]context.Context(nil), l.bound...)
}

type boundIPTables struct {
	l   *lockingIPTables
	ctx context.Context
}

func (b boundIPTables) wait(what string) error {
	if b.l.missed.Add(-1) >= 0 {
		return fmt.Errorf("%s: %w: /run/xtables.lock held by pid 4242, waited 1s", what, cninet.ErrXtablesLock)
	}
	if !b.l.held {
		return nil
	}
	if !b.l.block {
		return fmt.Errorf("%s: %w: /run/xtables.lock held by pid 4242, waited 1s", what, cninet.ErrXtablesLock)
	}
	<-b.ctx.Done()
	return fmt.Errorf("%s: stopped: %w; %w: /run/xtables.lock is held by pid 4242", what, b.ctx.Err(), cninet.ErrXtablesLock)
}

func (b boundIPTables) List(table, chain string) ([]string, error) {
	if err := b.wait("iptables -t " + table + " -S " + chain); err != nil {
		return nil, err
	}
	return b.l.List(table, chain)
}

func (b boundIPTables) Delete(table, chain string, spec ...string) error {
	if err := b.wait("iptables -t " + table + " -D " + chain); err != nil {
		return err
	}
	return b.l.Delete(table, chain, spec...)
}

func (b boundIPTables) ClearAndDeleteChain(table, chain string) error {
	if err := b.wait("iptables -t " + table + " -X " + chain); err != nil {
		return err
	}
	return b.l.ClearAndDeleteChain(table, chain)
}

func newLockingConfigurator(t *testing.T, ipt *lockingIPTables, fake *fakes.CNI) *cninet.Configurator {
	t.Helper()
	c, err := cninet.New(cninet.Config{ConfList: unitConfList(t), CNI: fake, CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables,
		Retry: fastRetry, IPTables: func(bool) (host.IPTables, error) { return ipt, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTeardownBehindAHeldXtablesLockEndsWithItsContext(t *testing.T) {
	ipt := &lockingIPTables{IPTables: fakes.NewIPTables(), held: true, block: true}
	c := newLockingConfigurator(t, ipt, &fakes.CNI{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Teardown(ctx, &cninet.Allocation{ID: "locked-1"}, "") }()
	select {
	case err := <-done:
		for _, want := range []error{cninet.ErrCleanupFailed, cninet.ErrXtablesLock, context.DeadlineExceeded} {
			if !errors.Is(err, want) {
				t.Errorf("err = %v, want it to wrap %v", err, want)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("Teardown still running a minute after its 100ms deadline")
	}
}

// A busy host's other writer takes the xtables lock in bursts. A cleanup
// step whose iptables commands missed a gap while the Teardown's context
// still had time runs again and finishes, instead of reporting the rules
// it could not reach; without a deadline, the commands' lock waits were
// already bounded (host.DefaultLockWait), and the miss is reported.
func TestTeardownWhoseCleanupMissedAGapInTheXtablesLockTriesAgainWithinItsDeadline(t *testing.T) {
	missLockGaps(t, "busy-1", func(ctx context.Context, c *cninet.Configurator, id string) error {
		return c.Teardown(ctx, &cninet.Allocation{ID: id}, "")
	})
}

// missLockGaps runs op on the footprint of id while the xtables lock's
// holder lets commands through only in gaps: with a deadline that leaves
// time, the first commands miss the lock and op still removes the
// footprint; without one, a miss is reported (ErrXtablesLock within
// ErrCleanupFailed).
func missLockGaps(t *testing.T, id string, op func(ctx context.Context, c *cninet.Configurator, id string) error) {
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none
		missed   int32
		wantErr  error
	}{
		{"a deadline with time left: the steps run again until the lock is had", 10 * time.Second, 3, nil},
		{"no deadline: the miss is reported", 0, 1, cninet.ErrXtablesLock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipt := &lockingIPTables{IPTables: fakes.NewIPTables()}
			fp := footprint{network: "cninet-unit", id: id, ip: "198.18.0.2"}
			ipt.Load("nat", fp.nat()).Load("filter", fp.filter())
			masq := chain("CNI-", fp.network, fp.id)
			if !ipt.HasChain("nat", masq) {
				t.Fatalf("the footprint has no chain %s", masq)
			}
			ipt.missed.Store(tc.missed)
			c := newLockingConfigurator(t, ipt, &fakes.CNI{})
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			err := op(ctx, c, fp.id)
			if ipt.missed.Load() >= 0 {
				t.Fatalf("only %d of the %d commands that were to miss the lock ran", tc.missed-ipt.missed.Load()-1, tc.missed)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if ipt.HasChain("nat", masq) {
					t.Errorf("the chain %s is still there", masq)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !errors.Is(err, cninet.ErrCleanupFailed) {
				t.Fatalf("err = %v, want %v within ErrCleanupFailed", err, tc.wantErr)
			}
		})
	}
}
