package cninet

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/cninettest/fakes"
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
	t.Helper()
	conf, err := BridgeConfList(BridgeConfig{NetworkName: "w", BridgeName: "br-w", IPv4Subnet: "198.18.0.0/24", IPAMDataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h := fakes.NewHost()
	f := watchFixture{host: h, cni: &fakes.CNI{Host: h, CacheDir: t.TempDir()}, log: &syncBuffer{}, netns: filepath.Join(t.TempDir(), "netns")}
	if err := os.WriteFile(f.netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.c, err = New(Config{ConfList: conf, CNI: f.cni, CacheDir: f.cni.CacheDir, StateDir: t.TempDir(), Owner: "runner",
		IPTables: h.IPTables, NFTables: h.NFTables, Links: h.Links, RepairEvery: every,
		Logger: hclog.New(&hclog.LoggerOptions{Output: f.log, Level: hclog.Info})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.c.Close() })
	return f
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
	start := f.c.repairer.passesRun()
	waitFor(t, "the watcher's passes", func() bool { return f.c.repairer.passesRun() >= start+n })
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
	waitFor(t, "web-1's rules back, and a log line naming the repair", func() bool {
		return len(f.lines("web-1")) == want && strings.Contains(f.log.String(), "attachment repaired")
	})
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
			rec := f.c.registry.recorded("web-1", "w", "eth0")
			rec.State = "detaching"
			if err := f.c.registry.store.Put(rec); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "host-local gave its address to another workload", want: ErrNotRepairable, state: func(t *testing.T, f watchFixture) {
			rec := f.c.registry.recorded("web-1", "w", "eth0")
			dir := f.c.seams.network(f.c.nets.conf, "eth0", nil).IPAMDirs[0]
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
	conf, _ := f.c.nets.current()
	c, err := New(Config{ConfList: conf.bytes, CNI: hang, CacheDir: f.cni.CacheDir, StateDir: f.c.registry.store.Dir(), Owner: "runner",
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
	conf, _ := f.c.nets.current()
	c, err := New(Config{ConfList: conf.bytes, CNI: noopAdder{CNI: f.cni, calls: &calls}, CacheDir: f.cni.CacheDir, StateDir: f.c.registry.store.Dir(),
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
	start := c.repairer.passesRun()
	waitFor(t, "fifty more passes", func() bool { return c.repairer.passesRun() >= start+50 })
	if n := calls.Load(); n != 1 {
		t.Fatalf("portmap's ADD ran %d times in fifty passes, want once: then the watcher waits", n)
	}
}
