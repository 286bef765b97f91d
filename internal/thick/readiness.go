package thick

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultReadyCache is how long the daemon's /readyz reuses a readiness
// verdict before it runs the delegates' STATUS again.
const DefaultReadyCache = 5 * time.Second

// ReadinessCache runs an expensive readiness check (the delegates' STATUS:
// every plugin of every delegate network) at most once per interval, so a
// probe every few seconds does not run the plugins that often:
//
//   - a verdict (ready or not, and why) is reused for the interval after
//     the check that reached it ended;
//   - probes that find no fresh verdict share one run of the check
//     (single flight), whatever their number;
//   - Invalidate (the conf dir was reloaded) drops the verdict: the next
//     probe runs the check again, and a run that began before it is not
//     kept.
//
// An interval of 0 keeps no verdict: every probe runs the check, though
// concurrent probes still share a run. The zero value is not usable: use
// NewReadinessCache.
type ReadinessCache struct {
	check    func(context.Context) error
	interval time.Duration
	timeout  time.Duration
	now      func() time.Time // the clock verdicts are aged by; a test's fake

	mu      sync.Mutex
	gen     uint64 // bumped by Invalidate: runs of older generations are not kept
	fresh   bool   // verdict holds a kept result
	verdict error
	reached time.Time    // when the run that reached verdict ended
	flight  *readyFlight // the run in progress, if any
}

// readyFlight is one run of the check, shared by every probe that waits
// for it.
type readyFlight struct {
	gen     uint64
	waiters int           // probes waiting for it (read by tests)
	done    chan struct{} // closed once err is set
	err     error
}

// NewReadinessCache returns a cache of check's verdict, kept for interval
// (0: none kept); each run of check is bounded by timeout, whoever waits
// for it. A run is the cache's own: a probe that gives up waiting (its
// context ends) does not cut it short for the others.
func NewReadinessCache(check func(context.Context) error, interval, timeout time.Duration) *ReadinessCache {
	return &ReadinessCache{check: check, interval: interval, timeout: timeout, now: time.Now}
}

// Ready returns the kept verdict while it is fresh; otherwise it joins the
// run in progress or starts one, and returns that run's verdict, or an
// error wrapping ctx's when ctx ends first.
func (c *ReadinessCache) Ready(ctx context.Context) error {
	c.mu.Lock()
	if c.fresh && c.now().Sub(c.reached) < c.interval {
		verdict := c.verdict
		c.mu.Unlock()
		return verdict
	}
	f := c.flight
	if f == nil || f.gen != c.gen {
		f = &readyFlight{gen: c.gen, done: make(chan struct{})}
		c.flight = f
		go c.run(f)
	}
	f.waiters++
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the delegates' STATUS: %w", ctx.Err())
	}
}

// run runs the check for f, keeps its verdict unless Invalidate came
// since f began, and wakes f's waiters.
func (c *ReadinessCache) run(f *readyFlight) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	err := c.check(ctx)
	cancel()
	c.mu.Lock()
	f.err = err
	if f.gen == c.gen {
		c.fresh, c.verdict, c.reached = true, err, c.now()
	}
	if c.flight == f {
		c.flight = nil
	}
	c.mu.Unlock()
	close(f.done)
}

// Invalidate drops the kept verdict: the next Ready runs the check again
// (and does not join a run that began before). The daemon calls it when it
// reloads the conf dir (a change seen by the watch, or SIGHUP).
func (c *ReadinessCache) Invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.fresh = false
}
