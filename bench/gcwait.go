package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

// gcWaitTarget is the longest a Setup may wait for a GC that runs
// meanwhile (its lock wait's p99).
const gcWaitTarget = time.Second

// gcWaitResult is Setups started one after another while one GC of N
// leaked attachments (the reboot shape) runs.
type gcWaitResult struct {
	N      int
	GC     time.Duration
	Before sample // each Setup's lock wait before the GC began
	Wait   sample // each Setup's lock wait while the GC ran
	Took   sample // each of those Setups' whole time
}

// gcWaitScenario: the reboot shape of -gc-wait-n attachments (records and
// cached results of the owner "bench", namespaces gone) collected by one
// GC, while another owner's Configurator — another process's, as far as
// the host's locks go — sets up a new workload every 50 ms and tears it
// down, on a network of its own through a no-op CNI: each Setup's wait
// for its locks, as cninet logs it ("attachments found": lock), before
// and while the GC runs.
func gcWaitScenario(r *report) error {
	n := r.opts.gcWaitN
	if err := writeRebootLeak(gcRange, cninet.BackendIPTables, n); err != nil {
		return err
	}
	collector, err := gcConfigurator(gcRange, cninet.BackendIPTables)
	if err != nil {
		return err
	}
	defer collector.Close()
	waits := &lockWaits{}
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{Level: hclog.Debug, Output: discard{}})
	logger.RegisterSink(waits)
	conf := []byte(`{"cniVersion":"1.0.0","name":"gcwait","plugins":[{"type":"bridge"}]}`)
	runner, err := cninet.New(cninet.Config{ConfList: conf, CNI: &fakes.CNI{}, Owner: "bench-runner", Logger: logger})
	if err != nil {
		return err
	}
	defer runner.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cycle := func(i int) error {
		alloc := &cninet.Allocation{ID: fmt.Sprintf("gcwait-%05d", i)}
		if _, err := runner.Setup(ctx, alloc, "/var/run/netns/"+alloc.ID); err != nil {
			return err
		}
		return runner.Teardown(ctx, alloc, "")
	}
	res := &gcWaitResult{N: n}
	for i := range 20 { // before the GC: the wait of an idle host
		if err := cycle(i); err != nil {
			return err
		}
	}
	res.Before = waits.take()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		rep, err := collector.GC(ctx, []string{})
		if err == nil && rep.Count(cninet.GCRecordedAttachment) != n {
			err = fmt.Errorf("GC collected %d recorded attachments, want %d", rep.Count(cninet.GCRecordedAttachment), n)
		}
		done <- err
	}()
	var gcErr error
	for i := 20; ; i++ {
		select {
		case gcErr = <-done:
		case <-time.After(50 * time.Millisecond):
			began := time.Now()
			if err := cycle(i); err != nil {
				return err
			}
			res.Took = append(res.Took, time.Since(began))
			continue
		}
		break
	}
	res.GC = time.Since(start)
	if gcErr != nil {
		return gcErr
	}
	res.Wait = waits.take()
	fmt.Fprintf(os.Stderr, "bench:   %d Setups during a GC of %d leaked attachments (%s): lock wait p50 %s, p99 %s\n",
		len(res.Wait), n, res.GC.Round(time.Millisecond), ms(res.Wait.percentile(50)), ms(res.Wait.percentile(99)))
	r.res.GCWait = res
	return checkRebootGone(gcRange, n)
}

// lockWaits collects the lock waits a Configurator logs for its Setups.
type lockWaits struct {
	mu    sync.Mutex
	waits sample
}

// Accept implements hclog.SinkAdapter.
func (l *lockWaits) Accept(_ string, _ hclog.Level, msg string, args ...any) {
	if msg != "attachments found" {
		return
	}
	var op string
	var lock time.Duration
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "operation":
			op, _ = args[i+1].(string)
		case "lock":
			lock, _ = args[i+1].(time.Duration)
		}
	}
	if op == "setup" {
		l.mu.Lock()
		l.waits = append(l.waits, lock)
		l.mu.Unlock()
	}
}

// take returns the waits collected since the last take.
func (l *lockWaits) take() sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.waits
	l.waits = nil
	return s
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (r *report) gcWaitSection(w writer) {
	w("### 5e. A Setup during a GC\n\n")
	w("%s", r.when("gc-setup-wait"))
	g := r.res.GCWait
	if g == nil {
		w("(not measured)\n\n")
		return
	}
	w("The reboot shape of 5d for %d attachments (a registry record and a cached result each, namespaces gone), collected by one `GC` of their owner; meanwhile another owner's Configurator sets up a new workload every 50 ms and tears it down (a no-op CNI on a network of its own: what is measured is the wait, not the plugins). The wait is the Setup's own account of how long it waited for its locks (the host's GC lock shared, the allocation's lock; cninet's Debug line \"attachments found\", `lock`). GC holds the host's GC lock only for the plugins' CNI 1.1 GC command and its sweep, and collects each dead attachment under that attachment's own lock.\n\n", g.N)
	w("| | Setups | lock wait p50 | p95 | p99 | max | Setup+Teardown p50 | target (p99) | |\n|---|---|---|---|---|---|---|---|---|\n")
	w("| before the GC | %d | %s | %s | %s | %s | – | | |\n", len(g.Before), ms(g.Before.percentile(50)), ms(g.Before.percentile(95)), ms(g.Before.percentile(99)), ms(g.Before.percentile(100)))
	w("| during the GC (%s) | %d | %s | %s | **%s** | %s | %s | ≤ %s | %s |\n\n", g.GC.Round(time.Second), len(g.Wait), ms(g.Wait.percentile(50)), ms(g.Wait.percentile(95)),
		ms(g.Wait.percentile(99)), ms(g.Wait.percentile(100)), ms(g.Took.median()), seconds(gcWaitTarget), verdict(len(g.Wait) > 0 && g.Wait.percentile(99) <= gcWaitTarget))
}

func (r *report) gcWaitTargets(w writer) {
	if g := r.res.GCWait; g != nil {
		w("| a Setup during a GC of %d leaked attachments: lock wait p99 ≤ %s | %s (p50 %s) | %s |\n", g.N, seconds(gcWaitTarget),
			ms(g.Wait.percentile(99)), ms(g.Wait.percentile(50)), verdict(len(g.Wait) > 0 && g.Wait.percentile(99) <= gcWaitTarget))
	}
}
