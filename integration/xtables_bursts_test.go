package integration

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"golang.org/x/sys/unix"
)

// burstCycles is how many Setup+Teardown cycles run at once while another
// writer takes the xtables lock in bursts.
const burstCycles = 50

// A busy host: another writer (kube-proxy, a firewall manager) takes the
// xtables lock for 200 ms, lets it go for 100 ms, again and again. Every
// iptables command of the plugins and of cninet's own prevention and
// cleanup then waits for a gap. Each cycle must still succeed by its
// deadline, and nothing may stay: a cleanup that met the held lock while
// its context had time left waits for the next gap instead of reporting
// the rules it could not reach.
//
// Only the iptables plugin sets run here: the nftables backend's rules
// take no xtables lock, so the writer would hold up nothing of theirs.
func TestCyclesWhileAnotherWriterHoldsTheXtablesLockInBurstsAllSucceedAndLeaveNothing(t *testing.T) {
	netsandbox.Require(t)
	for _, set := range netsandbox.PluginSets(t) {
		if set.Backend == "iptables" { // see above: the lock does not concern nftables' rules
			t.Run(set.Name, func(t *testing.T) { testCyclesUnderLockBursts(t, set) })
		}
	}
}

func testCyclesUnderLockBursts(t *testing.T, set netsandbox.PluginSet) {
	dir := os.Getenv(legacyEnv)
	if dir == "" {
		runOnIPTablesLegacy(t)
		return
	}
	nw := newNetwork(t, set, false)
	c := newConfigurator(t, set, nw.conf)
	// The bridge, its admin chain and the plugins' shared chains
	// exist before the baseline: the cycles are judged on what they
	// add, not on what the first Setup of a network creates.
	warm := netsandbox.NewWorkload(t)
	warmAlloc := &cninet.Allocation{ID: "burst-warm", Ports: []cninet.Port{{Value: 28199, To: 80}}}
	if _, err := c.Setup(ctxFor(t, time.Minute), warmAlloc, warm.Path); err != nil {
		t.Fatal(err)
	}
	if err := c.Teardown(ctxFor(t, time.Minute), warmAlloc, warm.Path); err != nil {
		t.Fatal(err)
	}
	base := baseline(t)
	workloads := make([]*netsandbox.Workload, burstCycles)
	for i := range workloads {
		workloads[i] = netsandbox.NewWorkload(t)
	}

	writer := startBurstWriter(t, 200*time.Millisecond, 100*time.Millisecond)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, burstCycles)
	for i, w := range workloads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxFor(t, time.Minute)
			alloc := &cninet.Allocation{ID: fmt.Sprintf("burst-%d", i), Ports: []cninet.Port{{Value: 28200 + i, To: 80}}}
			if _, err := c.Setup(ctx, alloc, w.Path); err != nil {
				errs <- fmt.Errorf("setup %s: %w", alloc.ID, err)
				return
			}
			if err := c.Teardown(ctx, alloc, w.Path); err != nil {
				errs <- fmt.Errorf("teardown %s: %w", alloc.ID, err)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	bursts := writer.stop()
	close(errs)
	t.Logf("%d cycles took %s while the writer held the lock %d times", burstCycles, took.Round(time.Millisecond), bursts)
	for err := range errs {
		t.Error(err)
	}
	// The writer must have been in the way: at one burst per 300 ms,
	// fewer than three bursts would mean the cycles barely met it.
	if bursts < 3 {
		t.Errorf("the writer held the lock only %d times in %s: the cycles did not run under pressure", bursts, took)
	}
	waitForExit(t, dir)
	assertNoLeaks(t, base, nw.allowance())
}

// burstWriter takes the xtables lock in bursts until stopped.
type burstWriter struct {
	done   chan struct{}
	exited chan struct{}
	bursts atomic.Int64
}

// startBurstWriter takes the lock (waiting for it like any other writer),
// holds it for hold, lets it go for gap, and again, until stop.
func startBurstWriter(t *testing.T, hold, gap time.Duration) *burstWriter {
	t.Helper()
	f, err := os.OpenFile(os.Getenv("XTABLES_LOCKFILE"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	b := &burstWriter{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(b.exited)
		defer f.Close()
		for {
			select {
			case <-b.done:
				return
			default:
			}
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				t.Errorf("the burst writer could not take the lock: %v", err)
				return
			}
			b.bursts.Add(1)
			time.Sleep(hold)
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
			time.Sleep(gap)
		}
	}()
	t.Cleanup(func() { b.stop() })
	return b
}

// stop ends the bursts, the lock released, and returns how many there were.
func (b *burstWriter) stop() int64 {
	select {
	case <-b.done:
	default:
		close(b.done)
	}
	<-b.exited
	return b.bursts.Load()
}
