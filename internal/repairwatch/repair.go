package repairwatch

import (
	"context"
	"sync"
	"time"

	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
)

// repairAll repairs drifting in one read of the host for them all, not
// one per attachment: a whole check of them (devices too: what cannot be
// restored in place is not tried), each one's repair under its own lock,
// then one check of those repaired.
func (w *Watcher) repairAll(ctx context.Context, drifting []Attachment, changed time.Time) {
	checker := w.parts.NewChecker(ctx, Read{})
	before := checker.Check(livesOf(drifting))
	results := make([]repairDone, len(drifting))
	ok := make([]bool, len(drifting))
	repairAt := func(i int) {
		if ctx.Err() == nil {
			results[i], ok[i] = w.repair(ctx, checker, drifting[i], before[i])
		}
	}
	// The first repair runs alone: it restores the chains the plugins
	// share, which two plugins' ADDs would race to create (one failing).
	// Unless it restored all it found missing, the others run one at a
	// time too.
	repairAt(0)
	workers := repairWorkers
	if !ok[0] || len(results[0].restored) < len(results[0].before.Missing) {
		workers = 1
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(drifting)-1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				repairAt(i)
			}
		}()
	}
	for i := 1; i < len(drifting); i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	var done []repairDone
	for i := range results {
		if ok[i] {
			done = append(done, results[i])
		}
	}
	if len(done) == 0 || ctx.Err() != nil {
		return
	}
	repaired := make([]Attachment, len(done))
	for i, d := range done {
		repaired[i] = d.a
	}
	for i, after := range w.parts.NewChecker(ctx, Read{}).Check(livesOf(repaired)) {
		w.account(ctx, done[i], after, changed)
	}
}

// repairDone is one repair a pass ran: of which attachment, as which
// record, what it restored, why not the rest, and when it began and
// ended.
type repairDone struct {
	a         Attachment
	rec       *registry.Record
	before    footprint.Health
	restored  []footprint.Missing
	err       error
	start, at time.Time
}

// repair repairs one attachment under its lock, from h (what the pass's
// check found missing), if nobody holds it (a Teardown, a Check, another
// process's repair: the next pass sees what they left), and only while
// its record still says attached: nothing of an attachment being torn
// down, or gone, comes back. A record changed since the pass read it is
// checked again alone first. Each restore adds only what is missing at
// the time it writes, so what another program restored meanwhile is not
// written twice.
func (w *Watcher) repair(ctx context.Context, checker Checker, a Attachment, h footprint.Health) (repairDone, bool) {
	ctx, cancel := context.WithTimeout(ctx, repairTimeout) // a plugin that hangs holds the id no longer
	defer cancel()
	unlock, busy := w.parts.TryEnter(a.Record.ID)
	if busy {
		w.busy.Store(true)
		return repairDone{}, false
	}
	defer unlock()
	rec := w.parts.Recorded(a.Record.Key)
	if rec == nil || rec.State != registry.Attached || rec.Owner != a.Record.Owner {
		return repairDone{}, false
	}
	if !rec.Updated.Equal(a.Record.Updated) {
		fresh, ok := w.parts.Attachment(rec)
		if !ok {
			return repairDone{}, false
		}
		a, checker = fresh, w.parts.NewChecker(ctx, Read{})
		h = checker.Check([]*footprint.Live{fresh.Live})[0]
	}
	if len(h.Missing) == 0 {
		return repairDone{}, false
	}
	start := time.Now()
	restored, err := a.Repair(ctx, checker, h)
	return repairDone{a: a, rec: rec, before: h, restored: restored, err: err, start: start, at: time.Now()}, true
}
