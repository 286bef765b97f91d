package repairwatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
)

// repairAll repairs drifting from a constant number of reads of the
// host, not two per attachment:
//
//   - under the lock of each (batchLocks), a whole check of them all
//     (devices too: what cannot be restored in place is not tried), and
//     their iptables rules and chains written in one batch planned from
//     it (restoreRules);
//   - after a batch, one more check: those it made whole are done;
//   - each one still lacking something repaired under its own lock, the
//     first alone (repairEach), then one check of those.
func (w *Watcher) repairAll(ctx context.Context, drifting []Attachment, changed time.Time) {
	locks := w.batchLocks(drifting)
	checker := w.parts.NewChecker(ctx, Read{})
	before := checker.Check(livesOf(drifting))
	batch := w.restoreRules(checker, drifting, before, locks)
	locks.leave()
	results := make([]repairDone, len(drifting))
	fresh := before // what each one's own repair starts from
	left := make([]int, 0, len(drifting))
	if len(batch.members) > 0 {
		checker = w.parts.NewChecker(ctx, Read{})
		fresh = checker.Check(livesOf(drifting))
		for i, rec := range batch.members {
			results[i] = repairDone{a: drifting[i], rec: rec, before: before[i], restored: restoredBetween(before[i], fresh[i]),
				err: batch.err, start: batch.start, at: batch.at}
		}
	}
	for i := range drifting {
		if len(fresh[i].Missing) > 0 {
			left = append(left, i)
		}
	}
	byPlugins := w.repairEach(ctx, checker, drifting, fresh, left, results)
	if ctx.Err() != nil {
		return
	}
	var repaired []int // by their own repair: checked once more
	for i := range results {
		switch {
		case byPlugins[i]:
			repaired = append(repaired, i)
		case results[i].rec != nil: // the batch's alone: the check after it is theirs
			w.account(ctx, results[i], fresh[i], changed)
		}
	}
	if len(repaired) == 0 {
		return
	}
	lives := make([]*footprint.Live, len(repaired))
	for j, i := range repaired {
		lives[j] = results[i].a.Live
	}
	for j, after := range w.parts.NewChecker(ctx, Read{}).Check(lives) {
		w.account(ctx, results[repaired[j]], after, changed)
	}
}

// repairEach repairs each of left (indices of drifting) from fresh, under
// its own lock, into results (adding to what a batch restored of it),
// and reports which it repaired. The first runs alone: it restores the
// chains the plugins share, which two plugins' ADDs would race to create
// (one failing); unless it made its attachment whole, the others run one
// at a time too.
func (w *Watcher) repairEach(ctx context.Context, checker Checker, drifting []Attachment, fresh []footprint.Health, left []int, results []repairDone) []bool {
	did := make([]bool, len(drifting))
	var mu sync.Mutex
	repairAt := func(i int) bool {
		if ctx.Err() != nil {
			return false
		}
		d, ok := w.repair(ctx, checker, drifting[i], fresh[i])
		if !ok {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		did[i] = true
		if results[i].rec == nil {
			results[i] = d
			return len(d.restored) == len(fresh[i].Missing) && d.err == nil
		}
		// the batch wrote its rules, the plugins the rest
		results[i].restored = append(results[i].restored, d.restored...)
		results[i].err, results[i].at = d.err, d.at
		return len(d.restored) == len(fresh[i].Missing) && d.err == nil
	}
	if len(left) == 0 {
		return did
	}
	workers := repairWorkers
	if !repairAt(left[0]) {
		workers = 1
	}
	left = left[1:]
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(left)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				repairAt(i)
			}
		}()
	}
	for _, i := range left {
		next <- i
	}
	close(next)
	wg.Wait()
	return did
}

// locks are the locks a pass holds for its batch: of which attachments
// (indices of drifting), as which records, and how to let them go.
type locks struct {
	held  map[int]*registry.Record
	leave func()
}

// batchLocks takes the lock of each of drifting that nobody else holds
// (a Teardown, a Check, another process: the next pass sees what they
// left) and whose record is still the attached one the pass read: only
// those may be in a batch, so nothing of an attachment being torn down,
// or gone, comes back.
func (w *Watcher) batchLocks(drifting []Attachment) locks {
	l := locks{held: map[int]*registry.Record{}}
	var leaves []func()
	l.leave = func() {
		for _, leave := range leaves {
			leave()
		}
	}
	for i, a := range drifting {
		leave, busy := w.parts.TryEnter(a.Record.ID)
		if busy {
			w.busy.Store(true)
			continue
		}
		leaves = append(leaves, leave)
		rec := w.parts.Recorded(a.Record.Key)
		if rec == nil || rec.State != registry.Attached || rec.Owner != a.Record.Owner || !rec.Updated.Equal(a.Record.Updated) {
			continue // torn down, or changed: its own repair checks it again
		}
		l.held[i] = rec
	}
	return l
}

// batch is what restoreRules wrote: for which attachments (indices of
// drifting, with their records), when, and why not all of it.
type batch struct {
	members   map[int]*registry.Record
	err       error
	start, at time.Time
}

// restoreRules writes the iptables rules and chains those of drifting
// whose locks are held lack, as before (read under those locks) found
// them, in one iptables-restore per family and table
// (footprint.PlanRules): of every one whose missing rules cninet knows
// every word of.
func (w *Watcher) restoreRules(checker Checker, drifting []Attachment, before []footprint.Health, l locks) batch {
	var idx []int
	var hs []footprint.Health
	for i := range drifting {
		if l.held[i] != nil && slices.ContainsFunc(before[i].Missing, isIPTables) {
			idx, hs = append(idx, i), append(hs, before[i])
		}
	}
	if len(hs) == 0 {
		return batch{}
	}
	b := batch{start: time.Now(), members: map[int]*registry.Record{}}
	members, err := checker.RestoreRules(hs)
	b.at, b.err = time.Now(), err
	for _, j := range members {
		b.members[idx[j]] = l.held[idx[j]]
	}
	switch {
	case err != nil:
		w.cfg.Logger.Warn("repair watcher: a batch of iptables rules failed; the plugins' ADD repairs what it left", "attachments", len(members),
			"duration", b.at.Sub(b.start), "error", err)
	case len(members) > 0:
		w.cfg.Logger.Info("repair watcher: iptables rules restored in one batch", "attachments", len(members), "duration", b.at.Sub(b.start))
	}
	return b
}

// restoredBetween is what before found missing that after does not.
func restoredBetween(before, after footprint.Health) []footprint.Missing {
	var out []footprint.Missing
	for _, m := range before.Missing {
		if !slices.Contains(after.Missing, m) {
			out = append(out, m)
		}
	}
	return out
}

// isIPTables reports whether m is an iptables or ip6tables rule or chain.
func isIPTables(m footprint.Missing) bool { return m.Backend == "iptables" || m.Backend == "ip6tables" }

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
