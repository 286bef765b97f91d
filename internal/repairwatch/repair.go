package repairwatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
)

// repairAll repairs drifting in one read of the host for them all, not
// one per attachment: a whole check of them (devices too: what cannot be
// restored in place is not tried), the iptables rules and chains they
// lack in one batch (restoreRules), then each one's repair of what is
// left under its own lock, then one check of those repaired.
func (w *Watcher) repairAll(ctx context.Context, drifting []Attachment, changed time.Time) {
	checker := w.parts.NewChecker(ctx, Read{})
	before := checker.Check(livesOf(drifting))
	results := make([]repairDone, len(drifting))
	ok := make([]bool, len(drifting))
	left := make([]int, 0, len(drifting)) // what the batch did not make whole
	if batched := w.restoreRules(ctx, drifting, before); len(batched) > 0 {
		checker = w.parts.NewChecker(ctx, Read{})
		now := checker.Check(livesOf(drifting))
		for i := range drifting {
			if d, in := batched[i]; in {
				results[i], ok[i] = d, true
			}
			if len(now[i].Missing) > 0 {
				left = append(left, i)
			}
			before[i] = now[i]
		}
	} else {
		for i := range drifting {
			left = append(left, i)
		}
	}
	repairAt := func(i int) {
		if ctx.Err() != nil {
			return
		}
		d, did := w.repair(ctx, checker, drifting[i], before[i])
		switch {
		case did && ok[i]: // the batch wrote its rules, the plugins the rest
			results[i].restored = append(results[i].restored, d.restored...)
			results[i].err, results[i].at = d.err, d.at
		case did:
			results[i], ok[i] = d, true
		}
	}
	// The first repair runs alone: it restores the chains the plugins
	// share, which two plugins' ADDs would race to create (one failing).
	// Unless it restored all it found missing, the others run one at a
	// time too.
	workers := repairWorkers
	if len(left) > 0 {
		first := left[0]
		repairAt(first)
		if !ok[first] || len(results[first].restored) < len(results[first].before.Missing) {
			workers = 1
		}
		left = left[1:]
	}
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

// restoreRules writes the iptables rules and chains drifting lack, of
// every attachment whose missing rules cninet knows every word of, in one
// iptables-restore per family and table (footprint.PlanRules), while it
// holds each one's lock: one another operation holds, or whose record is
// no longer the attached one the pass read, is left out, and what the
// batch writes is planned from a read of the host taken under the locks.
// It returns, by index of drifting, what it did of each it wrote for.
func (w *Watcher) restoreRules(ctx context.Context, drifting []Attachment, before []footprint.Health) map[int]repairDone {
	var locked []int
	var recs []*registry.Record
	for i, a := range drifting {
		if !slices.ContainsFunc(before[i].Missing, isIPTables) {
			continue
		}
		leave, busy := w.parts.TryEnter(a.Record.ID)
		if busy {
			w.busy.Store(true)
			continue
		}
		defer leave()
		rec := w.parts.Recorded(a.Record.Key)
		if rec == nil || rec.State != registry.Attached || rec.Owner != a.Record.Owner || !rec.Updated.Equal(a.Record.Updated) {
			continue // torn down, or changed: its own repair checks it again
		}
		locked = append(locked, i)
		recs = append(recs, rec)
	}
	if len(locked) == 0 {
		return nil
	}
	lives := make([]*footprint.Live, len(locked))
	for j, i := range locked {
		lives[j] = drifting[i].Live
	}
	checker := w.parts.NewChecker(ctx, Read{Shallow: true})
	now := checker.Check(lives)
	start := time.Now()
	members, err := checker.RestoreRules(now)
	at := time.Now()
	switch {
	case err != nil:
		w.cfg.Logger.Warn("repair watcher: a batch of iptables rules failed; the plugins' ADD repairs what it left", "attachments", len(members),
			"duration", at.Sub(start), "error", err)
	case len(members) > 0:
		w.cfg.Logger.Info("repair watcher: iptables rules restored in one batch", "attachments", len(members), "duration", at.Sub(start))
	}
	out := make(map[int]repairDone, len(members))
	for _, j := range members {
		i := locked[j]
		var restored []footprint.Missing
		for _, m := range now[j].Missing {
			if isIPTables(m) {
				restored = append(restored, m)
			}
		}
		out[i] = repairDone{a: drifting[i], rec: recs[j], before: before[i], restored: restored, err: err, start: start, at: at}
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
