package repairwatch

import (
	"context"
	"time"

	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

// A pass checks every live attachment the watcher keeps whole in one read
// of the host (firewall rules, reservations, cached results, whether each
// namespace still exists) and repairs those that lack something.

// Pass runs one periodic pass now, for a watcher nobody started (a
// benchmark): a started one runs its own.
func (w *Watcher) Pass(ctx context.Context) { w.pass(ctx, time.Time{}) }

// pass checks every live attachment the watcher keeps whole and repairs
// those that lack something; changed is when the change that triggered
// it was seen (zero for a periodic pass). It reports whether the check
// found anything missing (or could not read everything).
func (w *Watcher) pass(ctx context.Context, changed time.Time) (drifted bool) {
	defer w.passes.Add(1)
	atts := w.live()
	if len(atts) == 0 {
		return false
	}
	read := Read{Shallow: true, FirewallUnchanged: w.firewallKnown(atts)}
	checker := w.parts.NewChecker(ctx, read)
	if !read.FirewallUnchanged {
		w.firewallFresh = w.watching // a change from now on makes what this read finds stale
	}
	health := checker.Check(livesOf(atts))
	if !read.FirewallUnchanged {
		w.firewallWhole = make(map[identity.Key]time.Time, len(atts))
		for i, h := range health {
			if h.FirewallWhole() {
				w.firewallWhole[atts[i].Record.Key] = atts[i].Record.Updated
			}
		}
	}
	var drifting []Attachment
	for i, h := range health {
		switch {
		case h.Whole():
		case len(h.Missing) > 0 && w.held(atts[i]): // another operation's work under way, maybe
		default:
			drifted = true
			if len(h.Missing) > 0 && w.mayRepair(atts[i], h) {
				drifting = append(drifting, atts[i])
			}
		}
	}
	if len(drifting) > 0 {
		w.repairAll(ctx, drifting, changed)
	}
	return drifted
}

// held reports whether another operation (a Setup finishing, a
// Teardown, a Check, another process) holds a's id, noting it for a
// pass soon: what it finds missing may be that operation's work under
// way, and checking it again with the others drifting costs a read of
// the host for nothing.
func (w *Watcher) held(a Attachment) bool {
	leave, busy := w.parts.TryEnter(a.Record.ID)
	if busy {
		w.busy.Store(true)
		return true
	}
	leave()
	return false
}

// firewallKnown reports whether the firewall of atts is as the last read
// of it found it, whole: no nf_tables change arrived since that read
// began, the watch never lapsed, each of atts was whole in it as it is
// recorded now, and iptables' tables are nf_tables' (a change to
// iptables-legacy's arrives nowhere).
func (w *Watcher) firewallKnown(atts []Attachment) bool {
	if !w.watching || !w.firewallFresh {
		return false
	}
	for _, a := range atts {
		if at, ok := w.firewallWhole[a.Record.Key]; !ok || !at.Equal(a.Record.Updated) {
			return false
		}
	}
	return w.parts.IPTablesOnNFTables()
}

// live returns the attachments the watcher keeps whole: those the
// registry records as attached, of its owner (or of any owner, on the
// networks the Configurator knows).
func (w *Watcher) live() []Attachment {
	all, err := w.parts.Records()
	if err != nil {
		w.cfg.Logger.Warn("repair watcher: reading the host registry", "error", err)
	}
	var out []Attachment
	known := make(map[identity.Key]Attachment, len(w.known))
	for i := range all {
		rec := &all[i]
		if rec.State != registry.Attached || (rec.Owner != w.cfg.Owner && !w.cfg.AnyOwner) {
			continue
		}
		if !w.parts.Knows(rec.Network) {
			continue // another Configurator's network
		}
		a, ok := w.known[rec.Key]
		if !ok || !a.Record.Updated.Equal(rec.Updated) {
			if a, ok = w.parts.Attachment(rec); !ok {
				continue
			}
		}
		out = append(out, a)
		if len(rec.ConfList) > 0 && len(rec.Result) > 0 { // all it is built from is in the record
			known[rec.Key] = a
		}
	}
	w.known = known
	w.forgetGone(all, err)
	return out
}
