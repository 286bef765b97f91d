package cninet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/fakecni"
	"github.com/seed1280861d/cninet/internal/fakeipt"
	"github.com/seed1280861d/cninet/internal/fakenft"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// multiFixture is a Configurator over a ConfDir of three networks: a (the
// default) and b, bridge networks with port mappings, and c, a ptp network
// without. a as eth0 goes through the fake go-cni, everything else
// through the fake driver.
type multiFixture struct {
	c       *Configurator
	cni     *fakecni.CNI
	drv     *fakeDriver
	v4, v6  *fakeipt.IPTables
	nft     *fakenft.NFTables
	dir     string
	ipamDir string
	cache   string
}

func newMultiFixture(t *testing.T, retry RetryPolicy, pluginDirs ...string) multiFixture {
	t.Helper()
	f := multiFixture{cni: &fakecni.CNI{}, drv: &fakeDriver{addErrs: map[string][]error{}, checkErrs: map[string]error{}},
		v4: fakeipt.New(), v6: fakeipt.New(), nft: &fakenft.NFTables{}, dir: t.TempDir(), ipamDir: t.TempDir(), cache: t.TempDir()}
	for i, name := range []string{"a", "b"} {
		conf, err := BridgeConfList(BridgeConfig{NetworkName: name, BridgeName: "br-" + name,
			IPv4Subnet: fmt.Sprintf("198.18.%d.0/24", i), IPAMDataDir: f.ipamDir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := WriteConfList(f.dir, conf); err != nil {
			t.Fatal(err)
		}
	}
	ptp := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"ptp","ipMasq":true,
		"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"198.18.2.0/24"}]]}}]}`, f.ipamDir)
	if _, err := WriteConfList(f.dir, []byte(ptp)); err != nil {
		t.Fatal(err)
	}
	if len(pluginDirs) == 0 {
		pluginDirs = []string{t.TempDir()} // no plugin ever runs from here
	}
	c, err := New(Config{ConfDir: f.dir, NetworkName: "a", CNI: f.cni, CacheDir: f.cache, Retry: retry, PluginDirs: pluginDirs,
		NFTables: func() (NFTables, error) { return f.nft, nil },
		IPTables: func(v6 bool) (IPTables, error) {
			if v6 {
				return f.v6, nil
			}
			return f.v4, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	f.drv.cacheDir = f.cache
	c.driver = f.drv
	f.c = c
	return f
}

var quickRetry = RetryPolicy{Attempts: 2, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}

// cniVerbs are the fake go-cni's attach verbs, without its bookkeeping.
func (f multiFixture) cniVerbs() string {
	var v []string
	for _, s := range f.cni.Verbs() {
		if s != "Status" && s != "Load" {
			v = append(v, s)
		}
	}
	return strings.Join(v, " ")
}

// leakMasquerade plants the bridge plugin's iptables masquerade rule and
// chain of (network, id), as its DEL leaves them when the namespace is gone.
func (f multiFixture) leakMasquerade(network, id, ip string) {
	o := footprint.Attachment{Network: network, ID: id}
	f.v4.Load("nat", fmt.Sprintf("-N %s\n-A POSTROUTING -s %s/32 %s\n", o.MasqChain(), ip,
		fakeipt.Format([]string{"-m", "comment", "--comment", o.MasqComment(), "-j", o.MasqChain()})))
}

func (f multiFixture) hasMasquerade(network, id string) bool {
	return f.v4.HasChain("nat", footprint.Attachment{Network: network, ID: id}.MasqChain())
}

func TestNewKnowsEveryNetworkInConfDirTheDefaultFirst(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	if got := strings.Join(f.c.Networks(), " "); got != "a b c" {
		t.Fatalf("Networks() = %q, want every network in ConfDir, the default first", got)
	}
	if f.c.NetworkName() != "a" {
		t.Fatalf("NetworkName() = %q, want the default", f.c.NetworkName())
	}
}

func TestSetupJoinsTheNamedNetworksInOrderOneInterfaceEach(t *testing.T) {
	cases := []struct {
		name     string
		networks []string
		cni      string             // the fake go-cni's verbs
		driver   string             // sorted: the networks attach concurrently
		want     []AttachmentStatus // Network and InterfaceName only
	}{
		{"no names: the default network through go-cni, as always", nil, "Setup", "",
			[]AttachmentStatus{{Network: "a", InterfaceName: "eth0"}}},
		{"the default network first: go-cni for it, libcni for the rest", []string{"a", "b", "c"}, "Setup", "ADD b/eth1, ADD c/eth2",
			[]AttachmentStatus{{Network: "a", InterfaceName: "eth0"}, {Network: "b", InterfaceName: "eth1"}, {Network: "c", InterfaceName: "eth2"}}},
		{"the default network later: libcni for all", []string{"c", "a"}, "", "ADD a/eth1, ADD c/eth0",
			[]AttachmentStatus{{Network: "c", InterfaceName: "eth0"}, {Network: "a", InterfaceName: "eth1"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			st, err := f.c.Setup(context.Background(), &Allocation{ID: "w", NetworkNames: tc.networks}, "/x")
			if err != nil {
				t.Fatal(err)
			}
			if f.cniVerbs() != tc.cni || f.drv.sortedLog() != tc.driver {
				t.Fatalf("go-cni %q, driver %q; want %q, %q", f.cniVerbs(), f.drv.sortedLog(), tc.cni, tc.driver)
			}
			if len(st.Networks) != len(tc.want) {
				t.Fatalf("Networks = %+v, want %d", st.Networks, len(tc.want))
			}
			seen := map[string]bool{}
			for i, got := range st.Networks {
				if got.Network != tc.want[i].Network || got.InterfaceName != tc.want[i].InterfaceName || !got.Address.Is4() || seen[got.Address.String()] {
					t.Errorf("Networks[%d] = %+v, want %s on %s with an address of its own", i, got, tc.want[i].Network, tc.want[i].InterfaceName)
				}
				seen[got.Address.String()] = true
			}
			first := st.Networks[0]
			if st.InterfaceName != first.InterfaceName || st.Address != first.Address || st.AddressIPv6 != first.AddressIPv6 {
				t.Errorf("top-level status %+v is not the first network's %+v", st, first)
			}
		})
	}
}

func TestAnUnknownOrInvalidNetworkFailsBeforeAnyPluginRuns(t *testing.T) {
	cases := []struct {
		name     string
		networks []string
		want     error
		inErr    []string
	}{
		{"an unknown network names it and the known ones", []string{"a", "nope"}, ErrNetworkNotFound, []string{`"nope"`, "known: a, b, c"}},
		{"a network twice", []string{"b", "b"}, ErrInvalidAllocation, []string{`"b" twice`}},
		{"a name no network can have", []string{"a b"}, ErrInvalidAllocation, []string{`"a b"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			alloc := &Allocation{ID: "w", NetworkNames: tc.networks}
			_, setupErr := f.c.Setup(context.Background(), alloc, "/x")
			for verb, err := range map[string]error{"Setup": setupErr,
				"Check": f.c.Check(context.Background(), alloc, "/x"), "Teardown": f.c.Teardown(context.Background(), alloc, "/x")} {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s: err = %v, want %v", verb, err, tc.want)
					continue
				}
				for _, s := range tc.inErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: error %q does not say %s", verb, err, s)
					}
				}
			}
			if f.cniVerbs() != "" || f.drv.log() != "" {
				t.Fatalf("plugins ran: go-cni %q, driver %q", f.cniVerbs(), f.drv.log())
			}
		})
	}
}

func TestSetupThatFailsInOneNetworkDetachesEveryNetworkAndNamesTheFailedOne(t *testing.T) {
	errBroken := errors.New("plugin failonce said no")
	cases := []struct {
		name    string
		addErrs map[string][]error
		failed  string            // the network the error names; "" for success
		calls   map[string]string // per network: the networks attach concurrently
	}{
		{"a transient failure is retried with a DEL in between", map[string][]error{"c": {errBroken}}, "",
			map[string]string{"b": "ADD eth0", "c": "ADD eth1, DEL eth1, ADD eth1", "a": "ADD eth2"}},
		{"the last network failing for good detaches all", map[string][]error{"a": {errBroken, errBroken}}, "a",
			map[string]string{"b": "ADD eth0, DEL eth0", "c": "ADD eth1, DEL eth1", "a": "ADD eth2, DEL eth2, ADD eth2, DEL eth2"}},
		{"the second network failing for good detaches the first and the third", map[string][]error{"c": {errBroken, errBroken}}, "c",
			map[string]string{"b": "ADD eth0, DEL eth0", "c": "ADD eth1, DEL eth1, ADD eth1, DEL eth1", "a": "ADD eth2, DEL eth2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			f.drv.addErrs = tc.addErrs
			f.leakMasquerade("b", "w", "198.18.1.2") // what a bridge ADD leaves when DEL cannot reach the namespace
			_, err := f.c.Setup(context.Background(), &Allocation{ID: "w", NetworkNames: []string{"b", "c", "a"}}, "/x")
			if got := f.drv.byNetwork(); !reflect.DeepEqual(got, tc.calls) {
				t.Fatalf("driver calls per network:\n  %v\nwant\n  %v", got, tc.calls)
			}
			if tc.failed == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrSetupFailed) || !errors.Is(err, errBroken) || !strings.Contains(err.Error(), fmt.Sprintf("network %q", tc.failed)) {
				t.Fatalf("err = %v, want ErrSetupFailed naming network %q and wrapping the plugin's error", err, tc.failed)
			}
			if f.hasMasquerade("b", "w") {
				t.Fatal("the rollback of network b did not force-clean what its DEL left")
			}
			if left, _ := filepath.Glob(filepath.Join(f.cache, "results", "*")); len(left) > 0 {
				t.Fatalf("cached attachments left after the rollback: %v", left)
			}
		})
	}
}

func TestTeardownDetachesEveryNetworkLastFirstAndReportsEachFailure(t *testing.T) {
	errList := errors.New("iptables: cannot list")
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", Ports: []Port{{Value: 8080, To: 80}}, Args: map[string]string{"K": "v"}, NetworkNames: []string{"a", "b", "c"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b", "c"} {
		f.v4.FailList["nat/"+footprint.Attachment{Network: n, ID: "w"}.MasqChain()] = errList
	}
	err := f.c.Teardown(context.Background(), alloc, "/x")
	if got, want := f.drv.byNetwork(), map[string]string{"b": "ADD eth1, DEL eth1", "c": "ADD eth2, DEL eth2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("driver calls %v, want %v", got, want)
	}
	if f.cniVerbs() != "Setup Remove" {
		t.Fatalf("go-cni calls %q: network a was not detached after the others failed", f.cniVerbs())
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Fatalf("err = %v, want one error per failed network", err)
	}
	for i, n := range []string{"c", "b"} {
		e := joined.Unwrap()[i]
		if !errors.Is(e, ErrCleanupFailed) || !errors.Is(e, errList) || !strings.Contains(e.Error(), fmt.Sprintf("network %q", n)) {
			t.Errorf("error %d = %v, want ErrCleanupFailed in network %q wrapping the cause", i, e, n)
		}
	}
	add, del := f.drv.find("ADD", "b"), f.drv.find("DEL", "b")
	if !reflect.DeepEqual(add.mappings, del.mappings) || !reflect.DeepEqual(add.args, del.args) || len(add.mappings) != 2 || len(add.args) != 2 {
		t.Fatalf("ADD sent %v %v, DEL %v %v: want the same port mappings and args", add.mappings, add.args, del.mappings, del.args)
	}
}

func TestCheckChecksEveryNetworkAndNamesEachFailingOne(t *testing.T) {
	cause := errors.New("interface eth2 not found")
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "b", "c"}}
	if err := f.c.Check(context.Background(), alloc, "/x"); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	if f.cniVerbs() != "Check" || f.drv.log() != "CHECK b/eth1, CHECK c/eth2" {
		t.Fatalf("go-cni %q, driver %q: want every network checked", f.cniVerbs(), f.drv.log())
	}
	f.drv.checkErrs["c"] = cause
	err := f.c.Check(context.Background(), alloc, "/x")
	if !errors.Is(err, ErrCheckFailed) || !errors.Is(err, cause) || !strings.Contains(err.Error(), `network "c"`) || strings.Contains(err.Error(), `network "b"`) {
		t.Fatalf("err = %v, want ErrCheckFailed naming network c only", err)
	}
}

func TestLibcniIsToldThePortMappingsOnlyWhereTheConflistDeclaresThemAndTheArgsEverywhere(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	req, err := newRequest(&Allocation{ID: "w", Ports: []Port{{Value: 8080}}, Args: map[string]string{"K": "v"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		network  string
		mappings bool
	}{{"b", true}, {"c", false}} {
		t.Run(tc.network, func(t *testing.T) {
			att := attachment{conf: f.c.nets.byName[tc.network], ifName: "eth1"}
			rt := libDriver{}.runtimeConf(req, att, "/x")
			_, has := rt.CapabilityArgs["portMappings"]
			if has != tc.mappings || rt.IfName != "eth1" || rt.ContainerID != "w" || rt.NetNS != "/x" || !reflect.DeepEqual(rt.Args, req.args) {
				t.Fatalf("runtime conf %+v: want port mappings %v and the args %v", rt, tc.mappings, req.args)
			}
		})
	}
}

func TestReloadAddsNetworksAndTeardownStillDetachesADroppedOne(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "c"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(f.dir, "c.conflist")); err != nil {
		t.Fatal(err)
	}
	d, err := BridgeConfList(BridgeConfig{NetworkName: "d", BridgeName: "br-d", IPv4Subnet: "198.18.3.0/24", IPAMDataDir: f.ipamDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteConfList(f.dir, d); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.c.Networks(), " "); got != "a b d" {
		t.Fatalf("after Reload: %q", got)
	}
	if _, err := f.c.Setup(context.Background(), &Allocation{ID: "v", NetworkNames: []string{"c"}}, "/y"); !errors.Is(err, ErrNetworkNotFound) {
		t.Fatalf("joining the dropped network: %v, want ErrNetworkNotFound", err)
	}
	if _, err := f.c.Setup(context.Background(), &Allocation{ID: "v", NetworkNames: []string{"d"}}, "/y"); err != nil {
		t.Fatalf("joining the new network: %v", err)
	}
	if err := f.c.Teardown(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.drv.log(), "DEL c/eth1") {
		t.Fatalf("driver calls %q: the dropped network was not detached", f.drv.log())
	}
}
