package integration

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestSoak runs SOAK_N Setup/Teardown cycles (default 200) at concurrency
// SOAK_C (default 8) against each plugin set: normal teardowns, namespaces
// deleted before teardown, runners that "crash" and leave their workloads to
// GC, and GC passes in between (every 50 cycles, or every SOAK_N/4 when
// fewer than 200). Workloads that stay live the whole soak serve HTTP
// through their mapped ports, and answer through both gateways after each
// GC. Then it audits: zero failures, zero leaks.
func TestSoak(t *testing.T) {
	n, conc := envInt("SOAK_N", 200), envInt("SOAK_C", 8)
	gcEvery := max(1, min(50, n/4))
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		var failures, crashed atomic.Int64
		var mu sync.Mutex
		live := map[string]bool{}
		staying := soakStaying(t, c, nw)
		liveIDs := func() []string {
			mu.Lock()
			defer mu.Unlock()
			ids := []string{}
			for id := range live {
				ids = append(ids, id)
			}
			for _, s := range staying {
				ids = append(ids, s.alloc.ID)
			}
			return ids
		}
		// answering fails unless every staying workload answers through
		// each gateway; it reports instead of failing: workers call it.
		answering := func(when string) {
			for _, s := range staying {
				for _, gw := range []netip.Addr{nw.gw4, nw.gw6} {
					port := s.alloc.Ports[0].Value
					if body, err := fetch(gw, port); err != nil || body != "hello from "+s.alloc.ID {
						failures.Add(1)
						t.Errorf("%s: %s via %s:%d answered %q, %v", when, s.alloc.ID, gw, port, body, err)
					}
				}
			}
		}
		answering("before the soak")
		jobs := make(chan int)
		var wg sync.WaitGroup
		start := time.Now()
		for worker := 0; worker < conc; worker++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					if err := soakCycle(t, c, i, &mu, live, &crashed); err != nil {
						failures.Add(1)
						t.Errorf("cycle %d: %v", i, err)
					}
					if i%gcEvery == gcEvery-1 {
						if _, err := c.GC(ctxFor(t, time.Minute), liveIDs()); err != nil {
							failures.Add(1)
							t.Errorf("GC after cycle %d: %v", i, err)
						}
						answering(fmt.Sprintf("after the GC after cycle %d", i))
					}
				}
			}()
		}
		for i := 0; i < n; i++ {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		if _, err := c.GC(ctxFor(t, time.Minute), liveIDs()); err != nil {
			t.Errorf("final GC: %v", err)
		}
		answering("after the final GC")
		for _, s := range staying {
			if err := c.Teardown(ctxFor(t, time.Minute), s.alloc, s.w.Path); err != nil {
				t.Errorf("teardown of %s: %v", s.alloc.ID, err)
			}
			s.w.Delete()
		}
		elapsed := time.Since(start)
		t.Logf("%d cycles at concurrency %d in %s (%.1f cycles/s); %d left to GC; failures %d",
			n, conc, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), crashed.Load(), failures.Load())
		assertNoLeaks(t, base, nw.allowance())
	})
}

// soakLive is a workload that stays live for the whole soak.
type soakLive struct {
	alloc *cninet.Allocation
	w     *netsandbox.Workload
}

// soakStaying sets up the workloads that stay live the whole soak, each
// serving HTTP on 8080 through its own mapped port.
func soakStaying(t *testing.T, c *cninet.Configurator, nw network) []soakLive {
	t.Helper()
	var out []soakLive
	for i := range 2 {
		s := soakLive{alloc: &cninet.Allocation{ID: fmt.Sprintf("soak-live-%d", i),
			Ports: []cninet.Port{{Value: hostPort(nw.cfg.NetworkName, i), To: 8080}}}, w: netsandbox.NewWorkload(t)}
		if _, err := c.Setup(ctxFor(t, time.Minute), s.alloc, s.w.Path); err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, s.w, 8080, s.alloc.ID)
		out = append(out, s)
	}
	return out
}

// soakCycle sets one workload up and takes it down one of three ways.
func soakCycle(t *testing.T, c *cninet.Configurator, i int, mu *sync.Mutex, live map[string]bool, crashed *atomic.Int64) error {
	w, err := netsandbox.CreateWorkload()
	if err != nil {
		return err
	}
	defer w.Delete()
	alloc := &cninet.Allocation{ID: fmt.Sprintf("soak-%d", i), Ports: []cninet.Port{{Value: 30000 + i%20000, To: 80}}}
	mu.Lock()
	live[alloc.ID] = true
	mu.Unlock()
	defer func() {
		mu.Lock()
		delete(live, alloc.ID)
		mu.Unlock()
	}()
	if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
		return err
	}
	switch rand.IntN(4) {
	case 0: // the runtime deleted the namespace first
		w.Delete()
	case 1: // the runner crashed: only GC will see this one again
		crashed.Add(1)
		return nil
	}
	return c.Teardown(ctxFor(t, time.Minute), alloc, w.Path)
}
