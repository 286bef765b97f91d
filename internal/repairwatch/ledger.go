package repairwatch

import (
	"context"
	"time"

	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

// The watcher never fights: it notes each repair it runs, and an
// attachment repaired maxRepairs times within fightWindow is reported and
// left alone until the window has passed; two repairs in a row that leave
// pieces missing back it off; one that cannot be repaired in place is
// reported once and not tried again until its record changes. What it
// notes goes with the attachment's record.

// backoff is how long the watcher leaves an attachment alone after
// repairs that did not make it whole, the second in a row and each after
// it: doubled at each, from fightWindow to maxBackoff, forgotten once a
// repair makes it whole.
type backoff struct {
	until      time.Time
	wait       time.Duration
	incomplete int // repairs in a row that left pieces missing
}

// maxBackoff bounds the pause after repairs that leave pieces missing.
var maxBackoff = time.Hour

// mayRepair reports whether the watcher repairs a, which h found
// drifting: not when it cannot be repaired in place, nor when it was
// repaired maxRepairs times within fightWindow (both reported once; the
// latter again once its window has passed: takeReopen).
func (w *Watcher) mayRepair(a Attachment, h footprint.Health) bool {
	key := a.Record.Key
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	recent := w.repairs[key][:0]
	for _, t := range w.repairs[key] {
		if now.Sub(t) < fightWindow {
			recent = append(recent, t)
		}
	}
	w.repairs[key] = recent
	l := a.Live
	switch {
	case w.lost[key].Equal(a.Record.Updated) && !a.Record.Updated.IsZero():
		return false // reported when found; its record has not changed since
	case now.Before(w.backoff[key].until):
		return false // its last repair left pieces missing: reported then
	case !h.InPlace():
		if _, done := w.reported[key]; !done {
			w.reported[key] = now
			w.cfg.Logger.Error("repair watcher: attachment cannot be repaired in place: re-create the workload", "alloc_id", l.ID,
				"network", l.Network, "ifname", l.IfName, "missing", missingOf(h))
			w.parts.Refused(context.Background(), l.Network, true)
		}
		return false
	case len(recent) >= maxRepairs:
		if reopens := recent[0].Add(fightWindow); w.reopen.IsZero() || reopens.Before(w.reopen) {
			w.reopen = reopens // a pass then, not only at the next interval
		}
		if at, done := w.reported[key]; !done || now.Sub(at) >= fightWindow {
			w.reported[key] = now
			msg := "repair watcher: drift keeps coming back: another program removes this attachment's rules; not repairing it for now"
			if w.failed[key] != "" {
				msg = "repair watcher: repair keeps failing; not trying it again for now"
			}
			w.cfg.Logger.Error(msg, "alloc_id", l.ID, "network", l.Network, "ifname", l.IfName, "repairs", len(recent), "window", fightWindow,
				"missing", missingOf(h), "last_error", w.failed[key])
			w.parts.Refused(context.Background(), l.Network, false)
		}
		return false
	}
	delete(w.reported, key)
	return true
}

// takeReopen returns when the first attachment refused for its drift
// coming back may be repaired again (zero: none was refused), and
// forgets it: the watcher runs a pass then, rather than leaving it
// drifting until the next interval (RepairEvery may be an hour).
func (w *Watcher) takeReopen() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	at := w.reopen
	w.reopen = time.Time{}
	return at
}

// account notes a repair the pass ran, after is the attachment's health
// after it, and logs it: one found not repairable in place is not tried
// again until its record changes; a repair counts towards the fight
// limit, as failed when it restored nothing; one that left pieces
// missing is backed off; the time from the change to the repair is
// recorded when the attachment is whole.
func (w *Watcher) account(ctx context.Context, d repairDone, after footprint.Health, changed time.Time) {
	LogRepair(w.cfg.Logger, d.a.Live, after, Restored(d.restored, after), d.err, d.at.Sub(d.start))
	key := d.rec.Key
	w.mu.Lock()
	switch {
	case !d.before.InPlace():
		w.lost[key] = d.rec.Updated
	default:
		w.repairs[key] = append(w.repairs[key], d.at)
		w.failed[key] = ""
		if len(d.restored) == 0 { // the repair restored nothing: it failed
			w.failed[key] = describe(after)
		}
	}
	if len(after.Missing) > 0 && after.InPlace() {
		// Not whole after two repairs in a row (a piece no repair brings
		// back, a plugin that fails): trying every pass would only repeat
		// it. One such repair alone may have met a flush halfway.
		b := w.backoff[key]
		if b.incomplete++; b.incomplete >= 2 {
			b.wait = min(max(2*b.wait, fightWindow), maxBackoff)
			b.until = time.Now().Add(b.wait)
			w.cfg.Logger.Error("repair watcher: a repair left the attachment incomplete; trying it again later", "alloc_id", d.rec.ID,
				"network", d.rec.Network, "ifname", d.rec.IfName, "still_missing", missingOf(after), "error", d.err, "again_in", b.wait)
		}
		w.backoff[key] = b
	} else {
		delete(w.backoff, key)
	}
	w.mu.Unlock()
	if after.Whole() && !changed.IsZero() {
		w.parts.RepairedAfter(ctx, d.rec.Network, d.at.Sub(changed))
	}
}

// forgetGone drops what the watcher noted of attachments no longer
// recorded, so that a host that cycles through many workloads does not
// grow its maps for ever. A listing that failed forgets nothing: its
// records may be there still.
func (w *Watcher) forgetGone(records []registry.Record, listErr error) {
	if listErr != nil {
		return
	}
	recorded := make(map[identity.Key]bool, len(records))
	for i := range records {
		recorded[records[i].Key] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.repairs {
		if !recorded[key] {
			delete(w.repairs, key)
		}
	}
	for _, m := range []map[identity.Key]time.Time{w.reported, w.lost} {
		for key := range m {
			if !recorded[key] {
				delete(m, key)
			}
		}
	}
	for key := range w.failed {
		if !recorded[key] {
			delete(w.failed, key)
		}
	}
	for key := range w.backoff {
		if !recorded[key] {
			delete(w.backoff, key)
		}
	}
}
