package cninet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// watchFixture is a Configurator with a repair watcher on a fake host
// whose fake CNI acts as the plugins, and the log it writes.
type watchFixture struct {
	c     *Configurator
	netns string // a file standing for the workloads' namespace: the fake plugins never enter it
	host  *fakes.Host
	cni   *fakes.CNI
	log   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newWatchFixture(t *testing.T, every time.Duration) watchFixture {
	return newWatchFixtureOn(t, every, watchHost{})
}

// watchHost says how a watch fixture's host answers: its iptables list
// their tables chain by chain, or (saving) in one SaveAll per family, a
// read of the firewall being one SaveAll call, as iptables-nft's
// (nftBacked) or iptables-legacy's; wrap, if set, wraps the fake CNI;
// nft, if set, stands for the host's nftables.
type watchHost struct {
	saving, nftBacked bool
	wrap              func(*fakes.CNI) cni.CNI
	nft               host.NFTables // in place of the fake host's
}

// onNFTables is the fake host's iptables as iptables-nft's: its tables
// are nf_tables', so every change to them arrives as a change signal.
type onNFTables struct{ fakes.Saving }

func (onNFTables) OnNFTables() bool { return true }

func newWatchFixtureOn(tb testing.TB, every time.Duration, wh watchHost) watchFixture {
	tb.Helper()
	conf, err := BridgeConfList(BridgeConfig{NetworkName: "w", BridgeName: "br-w", IPv4Subnet: "198.18.0.0/20", IPAMDataDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	h := fakes.NewHost()
	f := watchFixture{host: h, cni: &fakes.CNI{Host: h, CacheDir: tb.TempDir()}, log: &syncBuffer{}, netns: filepath.Join(tb.TempDir(), "netns")}
	if err := os.WriteFile(f.netns, nil, 0o600); err != nil {
		tb.Fatal(err)
	}
	ipt := h.IPTables
	if wh.saving {
		ipt = func(v6 bool) (IPTables, error) {
			s := fakes.Saving{Batching: &fakes.Batching{IPTables: h.Family(v6)}}
			if wh.nftBacked {
				return onNFTables{s}, nil
			}
			return s, nil
		}
	}
	var driver cni.CNI = f.cni
	if wh.wrap != nil {
		driver = wh.wrap(f.cni)
	}
	nft := h.NFTables
	if wh.nft != nil {
		nft = func() (host.NFTables, error) { return wh.nft, nil }
	}
	f.c, err = New(Config{ConfList: conf, CNI: driver, CacheDir: f.cni.CacheDir, StateDir: tb.TempDir(), Owner: "runner",
		IPTables: ipt, NFTables: nft, Links: h.Links, RepairEvery: every,
		Logger: hclog.New(&hclog.LoggerOptions{Output: f.log, Level: hclog.Info})})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.c.Close() })
	return f
}

// logOnFailure logs what the watcher wrote, should the test fail.
func (f watchFixture) logOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(f.log.String())
		}
	})
}

// setUp sets id up with one mapped port.
func (f watchFixture) setUp(tb testing.TB, id string, port int) {
	tb.Helper()
	if _, err := f.c.Setup(context.Background(), &Allocation{ID: id, Ports: []Port{{Value: port, To: 80}}}, f.netns); err != nil {
		tb.Fatal(err)
	}
}

// lines returns what of id's footprint the host's IPv4 tables hold.
func (f watchFixture) lines(id string) []string {
	var left []string
	for _, fp := range f.cni.Footprints(id) {
		left = append(left, f.host.Leftovers(fp)...)
	}
	return left
}

// flush empties every IPv4 table and deletes its chains, as a firewall
// reload does.
func (f watchFixture) flush() { f.host.IPv4.Reset() }

// waitFor polls cond until it holds, failing after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waited 10s for %s", what)
}

// waitPasses waits until the watcher has run n passes more.
func (f watchFixture) waitPasses(t *testing.T, n int) {
	t.Helper()
	start := f.c.repairer.Passes()
	waitFor(t, "the watcher's passes", func() bool { return f.c.repairer.Passes() >= start+n })
}

func TestTheRepairWatcherRestoresAFlushByItselfAndNothingAfterClose(t *testing.T) {
	f := newWatchFixture(t, 10*time.Millisecond)
	alloc := &Allocation{ID: "web-1", Ports: []Port{{Value: 8080, To: 80}}}
	if _, err := f.c.Setup(context.Background(), alloc, f.netns); err != nil {
		t.Fatal(err)
	}
	want := len(f.lines("web-1"))
	f.flush()
	defer func() {
		if t.Failed() {
			t.Log(f.log.String())
		}
	}()
	waitFor(t, "web-1's rules back", func() bool { return len(f.lines("web-1")) == want })
	// The line is written once the repair returns, after the rules are back.
	waitFor(t, "a log line naming the repair", func() bool { return strings.Contains(f.log.String(), "attachment repaired") })
	if err := f.c.Close(); err != nil {
		t.Fatal(err)
	}
	f.flush()
	time.Sleep(100 * time.Millisecond) // ten intervals
	if left := f.lines("web-1"); len(left) != 0 {
		t.Fatalf("after Close the watcher restored %q", left)
	}
}

func TestTheRepairWatcherNeverBringsBackATornDownAttachment(t *testing.T) {
	f := newWatchFixture(t, 2*time.Millisecond)
	alloc := &Allocation{ID: "web-1", Ports: []Port{{Value: 8080, To: 80}}}
	for range 20 {
		if _, err := f.c.Setup(context.Background(), alloc, f.netns); err != nil {
			t.Fatal(err)
		}
		f.flush() // the watcher races the Teardown to repair it
		if err := f.c.Teardown(context.Background(), alloc, f.netns); err != nil {
			t.Fatal(err)
		}
		f.waitPasses(t, 2)
		if left := f.lines("web-1"); len(left) != 0 {
			t.Fatalf("the watcher brought back what Teardown took: %q", left)
		}
	}
}

// A repair that finds its id held (a Check, a Teardown, another
// process's repair) is skipped, and the watcher runs another pass soon:
// not only at the next change or interval, which may be an hour away.
// Nor is a held one checked again with those drifting: what is missing
// may be the holder's work under way, and that check is a read of the
// host for nothing.
func TestTheRepairWatcherTriesAgainSoonARepairWhoseIDWasHeld(t *testing.T) {
	f := newWatchFixtureOn(t, time.Hour, watchHost{saving: true}) // the change signal alone drives it
	f.logOnFailure(t)
	f.setUp(t, "web-1", 8080)
	want := len(f.lines("web-1"))
	waitFor(t, "the pass at start", func() bool { return f.c.repairer.Passes() >= 1 })
	leave, busy := f.c.registry.TryEnter("web-1")
	if busy {
		t.Fatal("web-1's id is held before the test holds it")
	}
	passes, reads := f.c.repairer.Passes(), f.host.IPv4.Count("SaveAll")
	f.flush()
	f.host.NFT.FlushRuleset() // the change signal
	waitFor(t, "three passes that met the held id", func() bool { return f.c.repairer.Passes() >= passes+3 })
	leave()
	ran, read := f.c.repairer.Passes()-passes, f.host.IPv4.Count("SaveAll")-reads
	if read > ran+1 {
		t.Fatalf("%d passes read the host %d times while the id was held, want one read each (their own check)", ran, read)
	}
	waitFor(t, "web-1's rules back without another change", func() bool { return len(f.lines("web-1")) == want })
}

func TestTheRepairWatcherReportsADriftThatKeepsComingBackInsteadOfFightingIt(t *testing.T) {
	f := newWatchFixture(t, 2*time.Millisecond)
	alloc := &Allocation{ID: "web-1", Ports: []Port{{Value: 8080, To: 80}}}
	if _, err := f.c.Setup(context.Background(), alloc, f.netns); err != nil {
		t.Fatal(err)
	}
	jump := ""
	for _, l := range f.lines("web-1") {
		if strings.HasPrefix(l, "-A CNI-HOSTPORT-DNAT") {
			jump = l
		}
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // another program that keeps deleting the jump
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				f.host.IPv4.Unload("nat", jump)
			}
		}
	}()
	defer func() {
		if t.Failed() {
			t.Log(f.log.String())
		}
	}()
	// Reported either way: as coming back (it was whole after its repair,
	// and went again), or as a repair that left it incomplete (it went
	// again before the check after the repair).
	waitFor(t, "the drift reported", func() bool {
		return strings.Contains(f.log.String(), "drift keeps coming back") || strings.Contains(f.log.String(), "left the attachment incomplete")
	})
	f.waitPasses(t, 10)
	count := func() int {
		n := 0
		for _, v := range f.cni.Verbs() {
			if v == "AddPlugin portmap" {
				n++
			}
		}
		return n
	}
	// docs/drift.md: a drift that comes back after three repairs within a
	// minute is reported (internal/repairwatch tests the limit itself).
	const maxRepairs = 3
	n := count()
	f.waitPasses(t, 50)
	if n < 1 || n > maxRepairs || count() != n {
		t.Fatalf("portmap's ADD ran %d times, then %d after fifty more passes; want 1 to %d and then none: the drift is reported, not fought",
			n, count(), maxRepairs)
	}
}

func TestARepairWritesNothingForAnAttachmentThatIsNotAttachedOrNotRepairableInPlace(t *testing.T) {
	cases := []struct {
		name  string
		state func(t *testing.T, f watchFixture)
		want  error
	}{
		{name: "its detach began (the record says detaching)", want: ErrCheckFailed, state: func(t *testing.T, f watchFixture) {
			rec := f.c.registry.Recorded("web-1", "w", "eth0")
			rec.State = "detaching"
			if err := f.c.registry.Store.Put(rec); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "host-local gave its address to another workload", want: ErrNotRepairable, state: func(t *testing.T, f watchFixture) {
			rec := f.c.registry.Recorded("web-1", "w", "eth0")
			dir := f.c.seams.Network(f.c.nets.Default(), "eth0", nil).IPAMDirs[0]
			if err := os.WriteFile(filepath.Join(dir, rec.Addresses[0].String()), []byte("web-9\r\neth0"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newWatchFixture(t, 0)
			alloc := &Allocation{ID: "web-1", Ports: []Port{{Value: 8080, To: 80}}}
			if _, err := f.c.Setup(context.Background(), alloc, f.netns); err != nil {
				t.Fatal(err)
			}
			tc.state(t, f)
			f.flush()
			err := f.c.Check(context.Background(), alloc, f.netns, CheckOptions{Repair: true})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Repair: %v, want %v", err, tc.want)
			}
			if left := f.lines("web-1"); len(left) != 0 {
				t.Fatalf("the repair wrote %q", left)
			}
			for _, v := range f.cni.Verbs() {
				if strings.HasPrefix(v, "AddPlugin") {
					t.Fatalf("the repair ran %s", v)
				}
			}
		})
	}
}

// hangingAdder is a fake CNI whose plugin ADD alone hangs (a plugin
// waiting for a lock) until released.
type hangingAdder struct {
	*fakes.CNI
	started chan struct{}
	release chan struct{}
}

func (h hangingAdder) AddPlugin(ctx context.Context, id, netns, typ string, prev types.Result, opts ...cni.NamespaceOpts) error {
	select {
	case h.started <- struct{}{}:
	default:
	}
	<-h.release
	return h.CNI.AddPlugin(ctx, id, netns, typ, prev, opts...)
}

// The watcher's repair of an attachment holds its lock; a Teardown of it
// waits no longer than its own deadline, then fails with ErrBusy.
func TestATeardownWaitsForAHungRepairNoLongerThanItsDeadline(t *testing.T) {
	f := newWatchFixture(t, 0)
	hang := hangingAdder{CNI: f.cni, started: make(chan struct{}, 1), release: make(chan struct{})}
	conf, _ := f.c.nets.Current()
	c, err := New(Config{ConfList: conf.Bytes, CNI: hang, CacheDir: f.cni.CacheDir, StateDir: f.c.registry.Store.Dir(), Owner: "runner",
		IPTables: f.host.IPTables, NFTables: f.host.NFTables, Links: f.host.Links, RepairEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer close(hang.release)
	alloc := &Allocation{ID: "web-1", Ports: []Port{{Value: 8080, To: 80}}}
	if _, err := c.Setup(context.Background(), alloc, f.netns); err != nil {
		t.Fatal(err)
	}
	f.flush() // a firewall reload: the watcher repairs, and its plugin hangs
	select {
	case <-hang.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no repair started")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Teardown(ctx, alloc, f.netns) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrBusy) {
			t.Fatalf("Teardown behind a hung repair: %v, want ErrBusy", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Teardown with a 200ms deadline still waits for the hung repair after 10s")
	}
}

// noopAdder is a fake CNI whose plugin ADD alone says it succeeded and
// writes nothing: a repair that does not make the attachment whole.
type noopAdder struct {
	*fakes.CNI
	calls *atomic.Int32
}

func (n noopAdder) AddPlugin(context.Context, string, string, string, types.Result, ...cni.NamespaceOpts) error {
	n.calls.Add(1)
	return nil
}

// A repair that leaves the attachment incomplete is not tried again at
// every pass: the watcher waits (a minute, then twice as long each time)
// and says so, rather than rerun the plugins every interval.
func TestTheRepairWatcherBacksOffARepairThatDoesNotMakeTheAttachmentWhole(t *testing.T) {
	f := newWatchFixture(t, 0)
	var calls atomic.Int32
	conf, _ := f.c.nets.Current()
	c, err := New(Config{ConfList: conf.Bytes, CNI: noopAdder{CNI: f.cni, calls: &calls}, CacheDir: f.cni.CacheDir, StateDir: f.c.registry.Store.Dir(),
		Owner: "runner", IPTables: f.host.IPTables, NFTables: f.host.NFTables, Links: f.host.Links, RepairEvery: 2 * time.Millisecond,
		Logger: hclog.New(&hclog.LoggerOptions{Output: f.log, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	alloc := &Allocation{ID: "web-1", Ports: []Port{{Value: 8080, To: 80}}}
	if _, err := c.Setup(context.Background(), alloc, f.netns); err != nil {
		t.Fatal(err)
	}
	for _, l := range f.lines("web-1") {
		if strings.HasPrefix(l, "-A CNI-HOSTPORT-DNAT") {
			f.host.IPv4.Unload("nat", l) // portmap's jump, which the no-op ADD never brings back
		}
	}
	waitFor(t, "the incomplete repair reported", func() bool { return strings.Contains(f.log.String(), "left the attachment incomplete") })
	start := c.repairer.Passes()
	waitFor(t, "fifty more passes", func() bool { return c.repairer.Passes() >= start+50 })
	if n := calls.Load(); n != 2 {
		t.Fatalf("portmap's ADD ran %d times in fifty passes, want twice (a repair that met a flush halfway is tried once more): then the watcher waits", n)
	}
}

// A pass repairs every drifting attachment from a constant number of
// reads of the host (its own check, one whole check of those drifting,
// one check of those repaired), not two more per attachment: after a
// flush, a host of many workloads is whole again in the time of their
// repairs, not of their repairs and as many listings.
func TestTheRepairWatcherRepairsAFlushOfManyAttachmentsInThreeReadsOfTheHost(t *testing.T) {
	f := newWatchFixtureOn(t, time.Hour, watchHost{saving: true}) // the change signal alone drives it
	f.logOnFailure(t)
	h := f.host
	const n = 6
	want := map[string]int{}
	for i := range n {
		id := fmt.Sprintf("web-%d", i)
		f.setUp(t, id, 8080+i)
		want[id] = len(f.lines(id))
	}
	waitFor(t, "the pass at start", func() bool { return f.c.repairer.Passes() >= 1 })
	reads, passes := h.IPv4.Count("SaveAll"), f.c.repairer.Passes()
	f.flush()
	h.NFT.FlushRuleset() // the firewall reload's change signal
	waitFor(t, "every attachment repaired", func() bool { return strings.Count(f.log.String(), "attachment repaired") >= n })
	waitFor(t, "the pass that repaired them", func() bool { return f.c.repairer.Passes() > passes })
	for id, lines := range want {
		if got := len(f.lines(id)); got != lines {
			t.Fatalf("%s has %d of its %d rules after the repair", id, got, lines)
		}
	}
	if got := strings.Count(f.log.String(), "attachment repaired"); got != n {
		t.Fatalf("%d repairs logged, want one per attachment (%d)", got, n)
	}
	if got := h.IPv4.Count("SaveAll") - reads; got != 3 {
		t.Fatalf("the pass read the host %d times for %d drifting attachments, want 3: its check, a whole check of those drifting, a check of those repaired", got, n)
	}
}

// BenchmarkRepairWatcherPass1000 is one pass of the watcher over 1,000
// whole attachments (what it costs every RepairEvery on a quiet host):
// the registry read, one check of them all.
func BenchmarkRepairWatcherPass1000(b *testing.B) {
	f := newWatchFixtureOn(b, 0, watchHost{saving: true}) // no watcher of its own: the benchmark's runs the passes
	for i := range 1000 {
		f.setUp(b, fmt.Sprintf("web-%04d", i), 20000+i)
	}
	w := newRepairWatcher(Config{RepairEvery: time.Hour}, f.c.owners.Configured, f.c.logger, f.c.checker)
	b.ReportAllocs()
	for b.Loop() {
		w.Pass(context.Background())
	}
}

// jumpOf is id's DNAT jump as the fake host lists it.
func (f watchFixture) jumpOf(t *testing.T, id string) string {
	t.Helper()
	for _, l := range f.lines(id) {
		if strings.HasPrefix(l, "-A CNI-HOSTPORT-DNAT") {
			return l
		}
	}
	t.Fatalf("%s has no DNAT jump: %q", id, f.lines(id))
	return ""
}

// On iptables-nft every change to the firewall arrives as a change
// signal: a periodic pass reads the firewall again only when one came
// (or an attachment's record is not one the last read found whole), so
// a quiet host of many workloads costs a pass the files alone.
func TestThePeriodicPassReadsTheFirewallOnlyWhenNFTablesSaysItChanged(t *testing.T) {
	f := newWatchFixtureOn(t, 2*time.Millisecond, watchHost{saving: true, nftBacked: true})
	f.logOnFailure(t)
	f.setUp(t, "web-1", 8080)
	f.waitPasses(t, 3)
	reads := f.host.IPv4.Count("SaveAll")
	f.waitPasses(t, 20)
	if got := f.host.IPv4.Count("SaveAll") - reads; got != 0 {
		t.Fatalf("20 quiet passes read the firewall %d times, want none: nothing changed since a read found it whole", got)
	}

	reads = f.host.IPv4.Count("SaveAll") // before: a pass may read it while Setup returns
	f.setUp(t, "web-2", 8081)            // its ADD signals no change here
	f.waitPasses(t, 3)
	if f.host.IPv4.Count("SaveAll") == reads {
		t.Fatal("a pass took web-2's firewall as whole without ever reading it")
	}

	f.waitPasses(t, 3)
	jump := f.jumpOf(t, "web-1")
	f.host.IPv4.Unload("nat", jump)
	f.host.NFT.FlushTable(host.NFTable{Family: "ip", Name: "cni_hostport"}) // the change signal iptables-nft's deletion sends
	waitFor(t, "web-1's jump restored after the change signal", func() bool { return slices.Contains(f.lines("web-1"), jump) })
}

// On iptables-legacy a change to the firewall arrives nowhere: every
// periodic pass reads it, and restores what went without a signal.
func TestThePeriodicPassReadsALegacyFirewallEveryTime(t *testing.T) {
	f := newWatchFixtureOn(t, 2*time.Millisecond, watchHost{saving: true, nftBacked: false})
	f.logOnFailure(t)
	f.setUp(t, "web-1", 8080)
	f.waitPasses(t, 3)
	reads := f.host.IPv4.Count("SaveAll")
	f.waitPasses(t, 6) // the first may have read before the count began
	if got := f.host.IPv4.Count("SaveAll") - reads; got < 5 {
		t.Fatalf("6 passes read the legacy firewall %d times, want each of them (the first maybe before the count)", got)
	}
	jump := f.jumpOf(t, "web-1")
	f.host.IPv4.Unload("nat", jump) // no signal: iptables-legacy sends none
	waitFor(t, "web-1's jump restored by a periodic pass", func() bool { return slices.Contains(f.lines("web-1"), jump) })
}

// overlapCNI is the fake CNI whose plugins' ADD alone notes how many run
// at once; fail's fail, and with together each but the first
// attachment's waits until two run at once (or fails the test).
type overlapCNI struct {
	*fakes.CNI
	t        *testing.T
	fail     string
	together bool
	mu       sync.Mutex
	inFlight int
	most     int
	met      chan struct{} // closed when two first ran at once
	closed   bool
}

func (c *overlapCNI) AddPlugin(ctx context.Context, id, netns, typ string, prev types.Result, opts ...cni.NamespaceOpts) error {
	c.mu.Lock()
	c.inFlight++
	c.most = max(c.most, c.inFlight)
	if c.inFlight == 2 && c.most == 2 && !c.closed {
		close(c.met)
		c.closed = true
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight--
		c.mu.Unlock()
	}()
	if id == c.fail {
		return fmt.Errorf("fake %s ADD of %s fails", typ, id)
	}
	if c.together && id != "web-0" { // the first repair runs alone
		select {
		case <-c.met:
		case <-time.After(10 * time.Second):
			c.t.Error("no two plugins' ADDs ran at once")
		}
	} else {
		time.Sleep(2 * time.Millisecond) // room for another to start, if one could
	}
	return c.CNI.AddPlugin(ctx, id, netns, typ, prev, opts...)
}

// After a flush, a pass repairs the first drifting attachment alone
// (the plugins' ADDs would race to create the chains they share), the
// others a few at once; when the first could not be made whole, the
// shared chains may still be missing, and they run one at a time.
func TestAPassRepairsTheOthersAtOnceOnlyAfterTheFirstWasMadeWhole(t *testing.T) {
	for _, c := range []struct {
		name, fail string
		together   bool
		repaired   int
	}{
		{"after a whole first repair the others run at once", "", true, 8},
		{"after a first repair that failed the others run one at a time", "web-0", false, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			var fake *overlapCNI
			f := newWatchFixtureOn(t, time.Hour, watchHost{wrap: func(inner *fakes.CNI) cni.CNI {
				fake = &overlapCNI{CNI: inner, t: t, fail: c.fail, together: c.together, met: make(chan struct{})}
				return fake
			}})
			f.logOnFailure(t)
			cfg, h, log := f.c, f.host, f.log
			for i := range 8 {
				f.setUp(t, fmt.Sprintf("web-%d", i), 8080+i)
			}
			waitFor(t, "the pass at start", func() bool { return cfg.repairer.Passes() >= 1 })
			passes := cfg.repairer.Passes()
			h.IPv4.Reset()
			h.NFT.FlushRuleset()
			waitFor(t, "the pass after the flush", func() bool { return cfg.repairer.Passes() > passes })
			if got := strings.Count(log.String(), "attachment repaired"); got != c.repaired {
				t.Fatalf("%d attachments repaired, want the %d whose ADD works", got, c.repaired)
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			if c.together && fake.most < 2 {
				t.Fatalf("at most %d plugins' ADDs ran at once, want several", fake.most)
			}
			if !c.together && fake.most != 1 {
				t.Fatalf("%d plugins' ADDs ran at once, want one at a time", fake.most)
			}
		})
	}
}
