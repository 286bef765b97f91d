package thick

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeStatus is a readiness check that counts its runs, answers verdict,
// and, while hold is set, blocks each run until release is called.
type fakeStatus struct {
	runs    atomic.Int32
	mu      sync.Mutex
	verdict error
	gate    chan struct{} // nil: runs return at once
}

// check reads its gate and verdict as it counts the run, under one lock:
// once a test sees runs go up, setVerdict no longer changes that run.
func (f *fakeStatus) check(ctx context.Context) error {
	f.mu.Lock()
	f.runs.Add(1)
	gate, verdict := f.gate, f.verdict
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return verdict
}

func (f *fakeStatus) hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = make(chan struct{})
}

func (f *fakeStatus) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gate)
	f.gate = nil
}

func (f *fakeStatus) setVerdict(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verdict = err
}

// fakeClock is the cache's clock, moved by the test only.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newFakeReadiness(interval time.Duration) (*ReadinessCache, *fakeStatus, *fakeClock) {
	status, clock := &fakeStatus{}, &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := NewReadinessCache(status.check, interval, time.Minute)
	c.now = clock.Now
	return c, status, clock
}

// probe calls Ready n times at once and returns their answers.
func probe(c *ReadinessCache, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Ready(context.Background())
		}()
	}
	wg.Wait()
	return errs
}

// waitWaiters waits until n probes wait for the run in progress.
func waitWaiters(t *testing.T, c *ReadinessCache, n int) {
	t.Helper()
	waitFor(t, "probes to join the run in progress", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.flight != nil && c.flight.waiters == n
	})
}

func wantRuns(t *testing.T, status *fakeStatus, want int32, when string) {
	t.Helper()
	if got := status.runs.Load(); got != want {
		t.Fatalf("%s: STATUS ran %d times, want %d", when, got, want)
	}
}

func TestReadinessCacheRunsStatusOncePerInterval(t *testing.T) {
	c, status, clock := newFakeReadiness(5 * time.Second)
	for i, err := range probe(c, 20) {
		if err != nil {
			t.Fatalf("probe %d: %v, want ready", i, err)
		}
	}
	wantRuns(t, status, 1, "20 probes at once")
	clock.advance(4 * time.Second)
	probe(c, 20)
	wantRuns(t, status, 1, "20 more probes 4s later, within the 5s interval")
	clock.advance(time.Second)
	probe(c, 20)
	wantRuns(t, status, 2, "20 probes once the interval passed")
	probe(c, 5)
	wantRuns(t, status, 2, "5 probes right after that run")
}

func TestReadinessCacheKeepsANotReadyVerdictAndSaysWhy(t *testing.T) {
	c, status, clock := newFakeReadiness(5 * time.Second)
	down := errors.New(`network "web": CNI STATUS: bridge down`)
	status.setVerdict(down)
	for i, err := range probe(c, 10) {
		if !errors.Is(err, down) {
			t.Fatalf("probe %d: %v, want the delegate's failure", i, err)
		}
	}
	status.setVerdict(nil)
	if err := c.Ready(context.Background()); !errors.Is(err, down) {
		t.Fatalf("within the interval: %v, want the kept failure", err)
	}
	wantRuns(t, status, 1, "11 probes within the interval")
	clock.advance(5 * time.Second)
	if err := c.Ready(context.Background()); err != nil {
		t.Fatalf("after the interval, with the delegate fixed: %v, want ready", err)
	}
	wantRuns(t, status, 2, "after the interval")
}

// Probes that find no verdict share the run in progress: with no
// verdict kept at all (interval 0), N probes waiting at once still run
// STATUS once.
func TestReadinessCacheProbesShareTheRunInProgress(t *testing.T) {
	c, status, _ := newFakeReadiness(0)
	status.hold()
	done := make(chan []error)
	go func() { done <- probe(c, 8) }()
	waitWaiters(t, c, 8)
	status.release()
	for i, err := range <-done {
		if err != nil {
			t.Fatalf("probe %d: %v, want ready", i, err)
		}
	}
	wantRuns(t, status, 1, "8 probes waiting at once")
	c.Ready(context.Background())
	wantRuns(t, status, 2, "a probe after the shared run, with interval 0")
}

func TestReadinessCacheInvalidate(t *testing.T) {
	t.Run("a reload drops the kept verdict: the next probe runs STATUS", func(t *testing.T) {
		c, status, _ := newFakeReadiness(time.Hour)
		down := errors.New("no such plugin")
		status.setVerdict(down)
		c.Ready(context.Background())
		status.setVerdict(nil)
		c.Invalidate()
		if err := c.Ready(context.Background()); err != nil {
			t.Fatalf("after Invalidate: %v, want the fresh verdict (ready)", err)
		}
		wantRuns(t, status, 2, "a probe, Invalidate, a probe")
	})
	t.Run("a run that began before the reload is not kept, nor joined by later probes", func(t *testing.T) {
		c, status, _ := newFakeReadiness(time.Hour)
		stale := errors.New("the conflist before the reload")
		status.setVerdict(stale)
		status.hold()
		first := make(chan error)
		go func() { first <- c.Ready(context.Background()) }()
		waitWaiters(t, c, 1)
		waitFor(t, "the run before the reload to read its verdict", func() bool { return status.runs.Load() == 1 })
		c.Invalidate()
		status.setVerdict(nil)
		second := make(chan error)
		go func() { second <- c.Ready(context.Background()) }()
		waitFor(t, "the probe after the reload to start a run of its own", func() bool { return status.runs.Load() == 2 })
		status.release()
		if err := <-first; !errors.Is(err, stale) {
			t.Fatalf("the probe before the reload: %v, want its run's verdict", err)
		}
		if err := <-second; err != nil {
			t.Fatalf("the probe after the reload: %v, want its own run's verdict (ready)", err)
		}
		if err := c.Ready(context.Background()); err != nil {
			t.Fatalf("a later probe: %v, want the kept verdict of the run after the reload", err)
		}
		wantRuns(t, status, 2, "the run before the reload, the run after, a probe within the interval")
	})
}

// A probe whose context ends stops waiting; the run goes on for the
// others and its verdict is kept.
func TestReadinessCacheProbeGivesUpAlone(t *testing.T) {
	c, status, _ := newFakeReadiness(time.Hour)
	status.hold()
	ctx, cancel := context.WithCancel(context.Background())
	impatient := make(chan error)
	go func() { impatient <- c.Ready(ctx) }()
	patient := make(chan error)
	go func() { patient <- c.Ready(context.Background()) }()
	waitWaiters(t, c, 2)
	cancel()
	if err := <-impatient; !errors.Is(err, context.Canceled) {
		t.Fatalf("the probe whose context ended: %v, want context.Canceled", err)
	}
	status.release()
	if err := <-patient; err != nil {
		t.Fatalf("the probe that waited: %v, want ready", err)
	}
	c.Ready(context.Background())
	wantRuns(t, status, 1, "two probes on one run, then one within the interval")
}

// The daemon's wiring: a Reload of the Delegates that read conflists
// calls OnReload's functions; one that still finds none does not.
func TestDelegatesOnReload(t *testing.T) {
	r := newDelegateRig(t)
	d := r.open(t)
	var calls atomic.Int32
	d.OnReload(func() { calls.Add(1) })
	if err := d.Reload(); !errors.Is(err, ErrNoDelegates) {
		t.Fatalf("Reload of an empty conf dir: %v, want ErrNoDelegates", err)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("a Reload that found no conflist called OnReload %d times, want 0", n)
	}
	r.writeConf(t)
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the Reload that loaded the first conflist called OnReload %d times, want 1", n)
	}
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("a Reload of the loaded conflists (SIGHUP) called OnReload %d times, want 2 in all", n)
	}
}
