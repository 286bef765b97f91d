package cninet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// events is an ordered, concurrency-safe log of what the fake plugins did.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

func (e *events) index(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Index(e.log, s)
}

// allStarted returns a hook that holds every ADD until n of them are
// running at once, then lets them finish in reverse allocation order; a
// Setup that attached one network after another never gets there.
func allStarted(t *testing.T, n int) func(context.Context, attachments.Attachment) error {
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	var order []chan struct{}
	for range n {
		order = append(order, make(chan struct{}))
	}
	go func() {
		select {
		case <-all:
		case <-time.After(10 * time.Second):
			return
		}
		for i := n - 1; i >= 0; i-- {
			close(order[i])
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func(ctx context.Context, na attachments.Attachment) error {
		mu.Lock()
		if started++; started == n {
			close(all)
		}
		mu.Unlock()
		i := int(na.IfName[len(na.IfName)-1] - '0')
		select {
		case <-order[i]:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the other networks' ADDs never started: not concurrent")
		}
	}
}

func TestSetupAttachesEveryNetworkConcurrentlyAndReportsThemInTheAllocationsOrder(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	f.drv.addHook = allStarted(t, 3)
	st, err := f.c.Setup(context.Background(), &Allocation{ID: "w", NetworkNames: []string{"c", "b", "a"}}, "/x")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range st.Interfaces {
		got = append(got, n.Network+"/"+n.IfName)
	}
	if want := []string{"c/eth0", "b/eth1", "a/eth2"}; !slices.Equal(got, want) {
		t.Fatalf("status %v, want %v although the last network finished first", got, want)
	}
	if st.IfName != "eth0" || st.Address != st.Interfaces[0].Address {
		t.Fatalf("top-level status %+v, want the first network's", st)
	}
}

func TestRollbackWaitsForAnADDStillRunningAndDetachesEveryNetwork(t *testing.T) {
	errBroken := errors.New("bridge: no such device")
	cases := []struct {
		name      string
		cancelCtx bool   // the caller gives up instead of network c failing
		named     string // the networks the error must name
	}{
		{"the second of three fails for good while the third is mid-ADD: the error names the second only", false, "c"},
		{"the caller's context is cancelled mid-ADD: the error names every network that was still attaching", true, "c a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, RetryPolicy{Attempts: 1})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ev := &events{}
			var running sync.WaitGroup
			running.Add(2)
			bDone := make(chan struct{})
			f.drv.addHook = func(ctx context.Context, att attachments.Attachment) error {
				switch att.Name() {
				case "b":
					close(bDone)
					return nil
				case "c":
					if !tc.cancelCtx {
						running.Wait()
						return errBroken
					}
				}
				running.Done()
				<-ctx.Done() // a plugin killed halfway
				time.Sleep(20 * time.Millisecond)
				ev.add("ADD returned " + att.Name())
				return ctx.Err()
			}
			f.c.drivers.Lib = recordingDels{f.drv, ev}
			if tc.cancelCtx {
				go func() { running.Wait(); <-bDone; cancel() }() // b has attached: only c and a are mid-ADD
			} else {
				running.Done() // only a blocks
			}
			f.leakMasquerade("a", "w", "198.18.0.9") // what a half-made bridge ADD leaves
			_, err := f.c.Setup(ctx, &Allocation{ID: "w", NetworkNames: []string{"b", "c", "a"}}, "/x")
			if !errors.Is(err, ErrSetupFailed) {
				t.Fatalf("err = %v, want ErrSetupFailed", err)
			}
			for _, name := range []string{"a", "b", "c"} {
				if named := strings.Contains(err.Error(), `network "`+name+`"`); named != strings.Contains(tc.named, name) {
					t.Errorf("error %q names network %s: %v, want %v", err, name, named, !named)
				}
				if del := ev.index("DEL " + name); del < 0 || del < ev.index("ADD returned a") {
					t.Errorf("network %s: DEL at %d, the running ADD returned at %d: want every network detached after every ADD returned (%v)",
						name, del, ev.index("ADD returned a"), ev.log)
				}
			}
			if tc.cancelCtx && !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want it to wrap context.Canceled", err)
			}
			if f.hasMasquerade("a", "w") {
				t.Error("the network whose ADD was cut short was not force-cleaned")
			}
			if left, _ := filepath.Glob(filepath.Join(f.cache, "results", "*")); len(left) > 0 {
				t.Errorf("cached attachments left: %v", left)
			}
		})
	}
}

// recordingDels logs each DEL in events, then passes it on.
type recordingDels struct {
	*fakeDriver
	ev *events
}

func (r recordingDels) Del(ctx context.Context, req attachments.Request, att attachments.Attachment, netns string, run footprint.PluginFilter) error {
	if run.Apart() {
		return r.fakeDriver.Del(ctx, req, att, netns, run)
	}
	r.ev.add("DEL " + att.Name())
	return r.fakeDriver.Del(ctx, req, att, netns, footprint.PluginFilter{})
}

// Within a Setup, a retry's DEL of an nftables-portmap network would take
// the hostport rules another such network's ADD is writing, and a
// Teardown's DEL of one would take the other networks': portmap's
// nftables DEL deletes by the bare container id. So every DEL of such a
// network runs without portmap while the workload has other networks
// (a Teardown runs portmap's DEL once for all of them first), and then
// nothing needs to wait: the networks attach and detach concurrently.
func TestNFTablesPortmapNetworksDetachWithoutPortmapWhileTheWorkloadHasOthers(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"b", "c", "a"}, Ports: []Port{{Value: 28080, To: 8080}}}
	for i, name := range []string{"a", "b"} { // their portmap on "backend": "nftables" now
		conf, err := BridgeConfList(BridgeConfig{NetworkName: name, BridgeName: "br-" + name,
			IPv4Subnet: fmt.Sprintf("198.18.%d.0/24", i), IPAMDataDir: f.ipamDir, Backend: BackendNFTables})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := WriteConfList(f.dir, conf); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.c.Reload(); err != nil {
		t.Fatal(err)
	}
	f.drv.addErrs["b"] = []error{errors.New("bridge: already exists")} // b retries: a DEL between its attempts
	var mu sync.Mutex
	adding := 0
	var addsOverlapped bool
	omitted := map[string][]string{} // the omit of each DEL, by network
	f.drv.addHook = func(_ context.Context, att attachments.Attachment) error {
		if !att.Conf.Info.Footprint.HostportNFT {
			return nil
		}
		mu.Lock()
		adding++
		addsOverlapped = addsOverlapped || adding > 1
		mu.Unlock()
		if att.Name() == "a" {
			time.Sleep(60 * time.Millisecond) // still adding when b's first attempt has failed
		} else {
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		adding--
		mu.Unlock()
		return nil
	}
	f.c.drivers.Lib = slowDels{f.drv, func(att attachments.Attachment, omit []string) {
		mu.Lock()
		defer mu.Unlock()
		omitted[att.Name()] = append(omitted[att.Name()], strings.Join(omit, ","))
	}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Teardown(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if !addsOverlapped {
		t.Error("the nftables-portmap networks' ADDs ran one after another: want them concurrent")
	}
	want := map[string][]string{"a": {"portmap"}, "b": {"portmap", "portmap"}, "c": {""}}
	if !reflect.DeepEqual(omitted, want) {
		t.Errorf("plugins left out of each DEL, by network: %q, want portmap out of every nftables-portmap DEL: %q", omitted, want)
	}
	// The Teardown, the whole workload leaving: portmap's DEL once, for
	// every network, on the first nftables-portmap network, before any
	// network's own DEL.
	if got := f.drv.byNetwork(); got["a"] != "ADD eth2, DEL eth2" || got["b"] != "ADD eth0, DEL eth0, ADD eth0, DEL portmap eth0, DEL eth0" || got["c"] != "ADD eth1, DEL eth1" {
		t.Fatalf("driver calls %v: want b retried, portmap's DEL once at the Teardown, every network attached and detached", got)
	}
}

// slowDels makes each network's DEL take a while and reports which
// plugins it was told to leave out.
type slowDels struct {
	*fakeDriver
	note func(att attachments.Attachment, omit []string)
}

func (s slowDels) Del(ctx context.Context, req attachments.Request, att attachments.Attachment, netns string, run footprint.PluginFilter) error {
	if run.Apart() {
		return s.fakeDriver.Del(ctx, req, att, netns, run)
	}
	s.note(att, run.LeftOut())
	time.Sleep(10 * time.Millisecond)
	return s.fakeDriver.Del(ctx, req, att, netns, run)
}

func TestSetupJoinsTheNamedNetworksInOrderOneInterfaceEach(t *testing.T) {
	cases := []struct {
		name     string
		networks []string
		cni      string            // the fake go-cni's calls
		driver   string            // sorted: the networks attach concurrently
		want     []InterfaceStatus // Network and IfName only
	}{
		{"no names: the default network through go-cni, as always", nil, "Setup", "",
			[]InterfaceStatus{{Network: "a", IfName: "eth0"}}},
		{"the default network first: go-cni for it, libcni for the rest", []string{"a", "b", "c"}, "Setup", "ADD b/eth1, ADD c/eth2",
			[]InterfaceStatus{{Network: "a", IfName: "eth0"}, {Network: "b", IfName: "eth1"}, {Network: "c", IfName: "eth2"}}},
		{"the default network later: libcni for all", []string{"c", "a"}, "", "ADD a/eth1, ADD c/eth0",
			[]InterfaceStatus{{Network: "c", IfName: "eth0"}, {Network: "a", IfName: "eth1"}}},
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
			if len(st.Interfaces) != len(tc.want) {
				t.Fatalf("Networks = %+v, want %d", st.Interfaces, len(tc.want))
			}
			seen := map[string]bool{}
			for i, got := range st.Interfaces {
				if got.Network != tc.want[i].Network || got.IfName != tc.want[i].IfName || !got.Address.Is4() || seen[got.Address.String()] {
					t.Errorf("Networks[%d] = %+v, want %s on %s with an address of its own", i, got, tc.want[i].Network, tc.want[i].IfName)
				}
				seen[got.Address.String()] = true
			}
			first := st.Interfaces[0]
			if st.IfName != first.IfName || st.Address != first.Address || st.AddressIPv6 != first.AddressIPv6 {
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
			for call, err := range map[string]error{"Setup": setupErr,
				"Check": f.c.Check(context.Background(), alloc, "/x"), "Teardown": f.c.Teardown(context.Background(), alloc, "/x")} {
				if !errors.Is(err, tc.want) {
					t.Errorf("%s: err = %v, want %v", call, err, tc.want)
					continue
				}
				for _, s := range tc.inErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: error %q does not say %s", call, err, s)
					}
				}
			}
			if f.cniVerbs() != "" || f.drv.log() != "" {
				t.Fatalf("plugins ran: go-cni %q, driver %q", f.cniVerbs(), f.drv.log())
			}
		})
	}
}

// callsMatch reports whether every network's calls are one of the
// alternatives want names for it, and no other network was called.
func callsMatch(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for network, alternatives := range want {
		if !slices.Contains(strings.Split(alternatives, " | "), got[network]) {
			return false
		}
	}
	return true
}

func TestSetupThatFailsInOneNetworkDetachesEveryNetworkAndNamesTheFailedOne(t *testing.T) {
	errBroken := errors.New("plugin failonce said no")
	cases := []struct {
		name    string
		addErrs map[string][]error
		failed  string            // the network the error names; "" for success
		calls   map[string]string // per network, alternatives split by " | ": the networks attach concurrently, and a sibling the failure cancels before its ADD only DELs
	}{
		{"a transient failure is retried with a DEL in between", map[string][]error{"c": {errBroken}}, "",
			map[string]string{"b": "ADD eth0", "c": "ADD eth1, DEL eth1, ADD eth1", "a": "ADD eth2"}},
		{"the last network failing for good detaches all", map[string][]error{"a": {errBroken, errBroken}}, "a",
			map[string]string{"b": "ADD eth0, DEL eth0 | DEL eth0", "c": "ADD eth1, DEL eth1 | DEL eth1", "a": "ADD eth2, DEL eth2, ADD eth2, DEL eth2"}},
		{"the second network failing for good detaches the first and the third", map[string][]error{"c": {errBroken, errBroken}}, "c",
			map[string]string{"b": "ADD eth0, DEL eth0 | DEL eth0", "c": "ADD eth1, DEL eth1, ADD eth1, DEL eth1", "a": "ADD eth2, DEL eth2 | DEL eth2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			f.drv.addErrs = tc.addErrs
			f.leakMasquerade("b", "w", "198.18.1.2") // what a bridge ADD leaves when DEL cannot reach the namespace
			_, err := f.c.Setup(context.Background(), &Allocation{ID: "w", NetworkNames: []string{"b", "c", "a"}}, "/x")
			if got := f.drv.byNetwork(); !callsMatch(got, tc.calls) {
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
