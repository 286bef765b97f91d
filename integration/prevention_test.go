package integration

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// The prevention rule, against the real plugins: while an attachment is
// torn down, collected, disconnected or rolled back, a second goroutine
// counts a live neighbour's rules in a loop, and the least it ever counts
// is what the neighbour had before.

// sampler counts something in a loop on a goroutine of its own until it
// is stopped, and keeps the least count it saw.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	least   int
	samples int
	err     error
	// taken is when each sample began and ended, to tell the samples
	// taken while the operation ran (see during).
	taken [][2]time.Time
	// opStart and opEnd bound the operation sampled; set by sampleWhile.
	opStart, opEnd time.Time
	// lastBegan is when the latest finished sample began (UnixNano), for
	// a positive control to wait for one that began after the operation
	// (settle).
	lastBegan atomic.Int64
}

// sample starts counting with count.
func sample(count func() (int, error)) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), least: -1}
	go func() {
		defer close(s.done)
		for {
			began := time.Now()
			n, err := count()
			if err != nil {
				s.err = err
				return
			}
			s.taken = append(s.taken, [2]time.Time{began, time.Now()})
			if s.least < 0 || n < s.least {
				s.least = n
			}
			s.samples++
			s.lastBegan.Store(began.UnixNano())
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}()
	return s
}

// during is how many samples were taken wholly while the operation ran:
// begun after it started, ended before it returned. Call it once the
// sampler is stopped.
func (s *sampler) during() int {
	n := 0
	for _, tk := range s.taken {
		if !tk[0].Before(s.opStart) && !tk[1].After(s.opEnd) {
			n++
		}
	}
	return n
}

// halt stops the sampler and fails if counting failed, or if no sample
// was taken while the operation ran: a sampler that never looked during
// it proves nothing.
func (s *sampler) halt(t *testing.T, what string) {
	t.Helper()
	close(s.stop)
	<-s.done
	if s.err != nil {
		t.Fatalf("counting %s: %v", what, s.err)
	}
	if d := s.during(); d < 1 {
		t.Fatalf("%s: none of the %d samples was taken while the operation ran (%s): the sampler saw nothing of it",
			what, s.samples, s.opEnd.Sub(s.opStart))
	}
}

// assertNeverBelow stops the sampler and fails unless every sample
// counted want and at least one was taken during the operation.
func (s *sampler) assertNeverBelow(t *testing.T, what string, want int) {
	t.Helper()
	s.halt(t, what)
	if s.samples < 2 || s.least != want {
		t.Fatalf("%s: the least of %d samples was %d, want %d at every instant", what, s.samples, s.least, want)
	}
	t.Logf("%s: %d in each of %d samples, %d of them during the operation", what, want, s.samples, s.during())
}

// assertDropped is assertNeverBelow's positive control: it stops the
// sampler and fails unless some sample counted less than before (and at
// least one was taken during the operation), proving that this sampler,
// in this situation, sees the drop the prevention exists to stop.
func (s *sampler) assertDropped(t *testing.T, what string, before int) {
	t.Helper()
	s.settle()
	s.halt(t, what)
	if s.least < 0 || s.least >= before {
		t.Fatalf("%s: the unprevented DEL left the count at %d or more in each of %d samples: the sampler cannot see a drop",
			what, before, s.samples)
	}
	t.Logf("%s: the unprevented DEL dropped it from %d to %d (%d samples, %d during the DEL)", what, before, s.least, s.samples, s.during())
}

// settle waits, for at most half a minute, until the sampler has
// finished a sample begun after the operation returned: on a loaded host
// the sampler's goroutine may not run between the moment an unprevented
// DEL removes what it counts and the DEL's return, and a drop that lasts
// (a DEL removes for good) must still be seen, or the positive control
// would fail for the scheduler's sake.
func (s *sampler) settle() {
	deadline := time.Now().Add(30 * time.Second)
	for s.lastBegan.Load() <= s.opEnd.UnixNano() && time.Now().Before(deadline) {
		select {
		case <-s.done: // counting failed: halt reports it
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// countForwardRules counts the CNI-FORWARD rules naming any of addrs as
// a host route.
func countForwardRules(addrs []netip.Addr) (int, error) {
	n := 0
	for _, v6 := range []bool{false, true} {
		bin := map[bool]string{false: "iptables", true: "ip6tables"}[v6]
		var prefixes []string
		for _, a := range addrs {
			if a.Is6() == v6 {
				prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()).String())
			}
		}
		if len(prefixes) == 0 {
			continue
		}
		out, err := exec.Command(bin, "-w", "5", "-S", "CNI-FORWARD").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%s -S CNI-FORWARD: %v: %s", bin, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if slices.ContainsFunc(strings.Fields(line), func(f string) bool { return slices.Contains(prefixes, f) }) {
				n++
			}
		}
	}
	return n, nil
}

// countHostportRules counts portmap's nftables rules carrying the
// container id whose line names addr.
func countHostportRules(id string, addr netip.Addr) (int, error) {
	family := map[bool]string{false: "ip", true: "ip6"}[addr.Is6()]
	out, err := exec.Command("nft", "list", "table", family, "cni_hostport").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("nft list table %s cni_hostport: %v: %s", family, err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, fmt.Sprintf("comment %q", id)) && strings.Contains(line, addr.String()) {
			n++
		}
	}
	return n, nil
}

// A workload on two networks whose portmap uses nftables: portmap's DEL
// deletes every rule carrying the container id, on every network. Taking
// one network away — by Disconnect, or by the Teardown of a Configurator
// that knows only that one, of an attachment whose record of the other
// network is gone (state the registry never saw) — never touches the
// other's hostport rules.
func TestDetachingOneNFTablesPortmapNetworkNeverTouchesTheOthersHostportRules(t *testing.T) {
	eachNFTablesPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		for _, way := range []string{"Disconnect", "Teardown by a Configurator that knows only the first network"} {
			t.Run(way, func(t *testing.T) {
				n1, n2 := twoNetworks(t, set)
				c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
				base := baseline(t)
				w := netsandbox.NewWorkload(t)
				alloc := &cninet.Allocation{ID: "same-id", Ports: []cninet.Port{{Value: 28191, To: 8080}},
					NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName}}
				st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
				if err != nil {
					t.Fatal(err)
				}
				serveHTTP(t, w, 8080, "same-id")
				addr1, addr2 := st.Interfaces[0].Address, st.Interfaces[1].Address
				before, err := countHostportRules(alloc.ID, addr2)
				if err != nil || before == 0 {
					t.Fatalf("%s's hostport rules before: %d, %v", n2.cfg.NetworkName, before, err)
				}
				only1 := newConfigurator(t, set, n1.conf)
				if way != "Disconnect" {
					// The second attachment as the host registry never saw
					// it (made before the registry, or by another tool): a
					// record would tell only1 it is the workload's too.
					if err := os.RemoveAll(filepath.Join("/var/lib/cninet", "attachments", alloc.ID, n2.cfg.NetworkName)); err != nil {
						t.Fatal(err)
					}
				}
				sampleWhile(t, n2.cfg.NetworkName+"'s hostport rules", before, func() (int, error) { return countHostportRules(alloc.ID, addr2) }, func() {
					if way == "Disconnect" {
						err = c.Disconnect(ctxFor(t, time.Minute), alloc, n1.cfg.NetworkName, w.Path)
					} else {
						err = only1.Teardown(ctxFor(t, time.Minute), &cninet.Allocation{ID: alloc.ID, Ports: alloc.Ports}, w.Path)
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				if left, err := countHostportRules(alloc.ID, addr1); err != nil || left != 0 {
					t.Fatalf("%s's own hostport rules left: %d, %v", n1.cfg.NetworkName, left, err)
				}
				if body, err := fetch(addr2, 8080); err != nil || body != "hello from same-id" {
					t.Fatalf("at its %s address: %q, %v", n2.cfg.NetworkName, body, err)
				}
				if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				w.Delete()
				assertNoLeaks(t, base, allowBoth(n1, n2))
			})
		}
	})
}

// The reboot history, then the pre-reboot allocation is set up again (a
// restarted task) and fails: the rollback's DEL would hand the firewall
// plugin the address of the stale cached result, which the new workload
// holds now. Its rules never drop.
func TestARolledBackSetupNextToTheLiveHolderOfItsStaleAddressNeverTouchesItsRules(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		r := playReboot(t, c, nw)
		serveHTTP(t, r.newNS, 8080, "new")
		want := 2 * len(r.newAddrs)
		if n, err := countForwardRules(r.newAddrs); err != nil || n != want {
			t.Fatalf("new's CNI-FORWARD rules before: %d, %v; want %d", n, err, want)
		}
		failing := withPlugin(t, nw.conf, map[string]any{"type": "failonce", "stateDir": t.TempDir()})
		again := newMultiConfigurator(t, set, failing, nil, cninet.RetryPolicy{Attempts: 1}, netsandbox.BuildPlugin(t, "failonce"))
		w := netsandbox.NewWorkload(t)
		var err error
		sampleWhile(t, "new's CNI-FORWARD rules", want, func() (int, error) { return countForwardRules(r.newAddrs) }, func() {
			_, err = again.Setup(ctxFor(t, time.Minute), r.old, w.Path)
		})
		if err == nil {
			t.Fatal("Setup with a failing plugin succeeded")
		}
		assertReachable(t, "after the rollback", r.newPort, "new", nw.gw4, nw.gw6)
		if err := c.Teardown(ctxFor(t, time.Minute), r.old, w.Path); err != nil {
			t.Fatal(err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), r.new, r.newNS.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		r.newNS.Delete()
		assertNoLeaks(t, base, nw.allowance())
	})
}

// eachNFTablesPluginSet runs test once per installed plugin set whose
// plugins use their nftables backends (portmap's iptables DEL deletes by
// its own network's comment and chain: nothing to prevent there).
func eachNFTablesPluginSet(t *testing.T, test func(t *testing.T, set netsandbox.PluginSet)) {
	netsandbox.Require(t)
	ran := false
	for _, set := range netsandbox.PluginSets(t) {
		if set.Backend == "nftables" {
			ran = true
			t.Run(set.Name, func(t *testing.T) { test(t, set) })
		}
	}
	if !ran {
		netsandbox.Unavailable(t, "no plugin set with the nftables backends is installed (run scripts/install-deps.sh)")
	}
}

// sampleWhile samples count from a second goroutine while fn runs, and
// fails unless every sample counted want and at least one sample was
// taken while fn ran.
func sampleWhile(t *testing.T, what string, want int, count func() (int, error), fn func()) {
	t.Helper()
	s := sampleAround(t, count, fn)
	s.assertNeverBelow(t, what, want)
}

// sampleDropWhile is sampleWhile's positive control: fn is the
// unprevented operation, and some sample must count less than before.
func sampleDropWhile(t *testing.T, what string, before int, count func() (int, error), fn func()) {
	t.Helper()
	s := sampleAround(t, count, fn)
	s.assertDropped(t, what, before)
}

// sampleAround starts sampling, runs fn, and returns the sampler still
// running, with the operation's bounds set.
func sampleAround(t *testing.T, count func() (int, error), fn func()) *sampler {
	t.Helper()
	s := sample(count)
	stopped := false
	defer func() {
		if !stopped { // fn failed the test: stop counting all the same
			close(s.stop)
			<-s.done
		}
	}()
	s.opStart = time.Now()
	fn()
	s.opEnd = time.Now()
	stopped = true
	return s
}

// unpreventedDEL runs network conf's whole DEL chain for id through
// libcni, as a runtime without cninet would: no address withheld from the
// cached result the firewall plugin deletes by, portmap not left out.
// It is the positive control of the samplers: the DEL cninet prevents.
func unpreventedDEL(t *testing.T, set netsandbox.PluginSet, conf []byte, id, netns, ifName string, ports []cninet.Port) error {
	t.Helper()
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		t.Fatal(err)
	}
	mappings, err := cninet.PortMappings(&cninet.Allocation{ID: id, Ports: ports}, false)
	if err != nil {
		t.Fatal(err)
	}
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: ifName,
		CapabilityArgs: map[string]any{"portMappings": mappings}}
	return libcni.NewCNIConfigWithCacheDir([]string{set.Dir}, "/var/lib/cni", nil).DelNetworkList(ctxFor(t, time.Minute), list, rt)
}

// The positive control of every CNI-FORWARD sampler (prevention, crash,
// histories): in the reboot history those tests build, the old
// allocation's DEL run without cninet (the firewall plugin given the
// stale cached result naming the new holder's addresses) does drop the
// new holder's count, and the sampler sees it drop while the DEL runs.
func TestTheForwardRuleSamplerSeesAnUnpreventedDELDropTheNeighboursRules(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		r := playReboot(t, c, nw)
		want := 2 * len(r.newAddrs)
		if n, err := countForwardRules(r.newAddrs); err != nil || n != want {
			t.Fatalf("new's CNI-FORWARD rules before: %d, %v; want %d", n, err, want)
		}
		var err error
		sampleDropWhile(t, "new's CNI-FORWARD rules", want, func() (int, error) { return countForwardRules(r.newAddrs) }, func() {
			err = unpreventedDEL(t, set, nw.conf, r.old.ID, r.oldNetns, "eth0", r.old.Ports)
		})
		if err != nil {
			t.Fatalf("the unprevented DEL: %v", err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), r.old, r.oldNetns); err != nil {
			t.Fatal(err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), r.new, r.newNS.Path); err != nil {
			t.Fatal(err)
		}
		r.newNS.Delete()
		assertNoLeaks(t, base, nw.allowance())
	})
}

// The positive control of the hostport-rule sampler: a workload on two
// networks whose portmap uses nftables, and the first network's DEL run
// without cninet (portmap in it): the second network's hostport rules of
// the same id drop, and the sampler sees them drop while the DEL runs.
func TestTheHostportRuleSamplerSeesAnUnpreventedDELDropTheOtherNetworksRules(t *testing.T) {
	eachNFTablesPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "same-id-control", Ports: []cninet.Port{{Value: hostPort(n1.cfg.NetworkName, 0), To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName}}
		st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		addr2 := st.Interfaces[1].Address
		before, err := countHostportRules(alloc.ID, addr2)
		if err != nil || before == 0 {
			t.Fatalf("%s's hostport rules before: %d, %v", n2.cfg.NetworkName, before, err)
		}
		sampleDropWhile(t, n2.cfg.NetworkName+"'s hostport rules", before, func() (int, error) { return countHostportRules(alloc.ID, addr2) }, func() {
			err = unpreventedDEL(t, set, n1.conf, alloc.ID, w.Path, "eth0", alloc.Ports)
		})
		if err != nil {
			t.Fatalf("the unprevented DEL: %v", err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		assertNoLeaks(t, base, allowBoth(n1, n2))
	})
}
