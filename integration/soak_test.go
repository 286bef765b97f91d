package integration

import (
	"fmt"
	"math/rand/v2"
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
// GC, and GC passes in between. Then it audits: zero failures, zero leaks.
func TestSoak(t *testing.T) {
	n, conc := envInt("SOAK_N", 200), envInt("SOAK_C", 8)
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		var failures, crashed atomic.Int64
		var mu sync.Mutex
		live := map[string]bool{}
		liveIDs := func() []string {
			mu.Lock()
			defer mu.Unlock()
			ids := []string{}
			for id := range live {
				ids = append(ids, id)
			}
			return ids
		}
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
					if i%50 == 49 {
						if _, err := c.GC(ctxFor(t, time.Minute), liveIDs()); err != nil {
							failures.Add(1)
							t.Errorf("GC after cycle %d: %v", i, err)
						}
					}
				}
			}()
		}
		for i := 0; i < n; i++ {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		if _, err := c.GC(ctxFor(t, time.Minute), []string{}); err != nil {
			t.Errorf("final GC: %v", err)
		}
		elapsed := time.Since(start)
		t.Logf("%d cycles at concurrency %d in %s (%.1f cycles/s); %d left to GC; failures %d",
			n, conc, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), crashed.Load(), failures.Load())
		assertNoLeaks(t, base, nw.allowance())
	})
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
