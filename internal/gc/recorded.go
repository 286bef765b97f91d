package gc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// recorded collects this owner's recorded attachments whose allocation
// is not live, in the networks GC covers, and any owner's recorded in an
// earlier boot (their namespaces are gone): each is detached as Teardown
// detaches, with its recorded conflist, args and port mappings, and its
// record goes when nothing of it is left. Each id is collected under its
// own lock, taken without waiting: an id another operation holds is left
// for later, and no other id waits for this GC. Another owner's records
// of this boot are never touched: their ids, and those a registry file
// that is no usable record names, count as live for the rest of the GC.
// Nor are this owner's records of networks this Configurator does not
// know (another Configurator of the same owner knows them, or a Teardown
// naming the network finishes them): their ids count as live too.
func (g *run) recorded(ctx context.Context) error {
	c := g.c
	all, err := c.Registry.Store.All()
	if err != nil {
		return fmt.Errorf("%w: reading the host registry: %w (its records were not collected)", errs.CleanupFailed, err)
	}
	others := map[string]bool{} // no GC of this owner may judge them
	for _, d := range all.Damaged {
		c.Logger.Warn("registry file is no usable record: kept, and its id is not collected", "path", d.Path, "error", d.Err)
		c.Tel.Kept(ctx, telemetry.KeptUnreadable, d.Key.Network)
		g.report.addUnreadable(d.Path)
		others[d.ID] = true
	}
	dead := map[string]bool{}
	elsewhere := map[string]bool{} // ids this owner recorded on networks this GC does not cover
	unjudged := map[string]bool{}  // of those, the ids whose other state this GC leaves alone
	for _, rec := range all.Records {
		mine, earlier := rec.Owner == g.owner, rec.FromEarlierBoot()
		switch {
		case !mine && !earlier:
			others[rec.ID] = true
		case !g.covers(rec.Network):
			if !mine {
				continue // dead, on a network this GC does not look at
			}
			elsewhere[rec.ID] = true
			if _, err := c.Nets.Known(rec.Network, false); err == nil && g.Only != nil {
				// Spared by GCOptions.Networks: the narrowed GC keeps
				// away from that network by itself.
				continue
			}
			// A network this Configurator does not know (another
			// Configurator of the same owner attached it), or one
			// whose conflist sets disableGC: the id lives there, so
			// none of its other state is this GC's to judge.
			unjudged[rec.ID] = true
		case !g.liveAt(rec.ID, rec.IfName):
			dead[rec.ID] = true
		}
	}
	protected := c.Registry.Admission.Protected()
	var failed []error
	for _, id := range slices.Sorted(maps.Keys(dead)) {
		if protected[id] || others[id] {
			continue
		}
		if err := g.collectRecorded(ctx, id, elsewhere[id] || g.partlyLive(id)); err != nil {
			failed = append(failed, err)
		}
	}
	for id := range others {
		g.live[id] = true // another owner's, or a damaged record's: never this GC's to judge
	}
	for id := range unjudged {
		g.live[id] = true // attached where this GC does not look: its other state is not this GC's to judge
	}
	return errors.Join(failed...)
}

// collects says which records a GC collects: its own owner's, and any
// owner's of an earlier boot.
func (g *run) collects(rec registry.Record) bool {
	return rec.Owner == g.owner || rec.FromEarlierBoot()
}

// collectRecorded detaches the dead id's recorded attachments that this
// GC collects in the networks it covers, unless another operation holds
// the id; elsewhere says the id keeps attachments in others. Its DEL
// enters the recorded namespace only while that is provably still the
// attachment's (Registry.RecordedNetNS).
func (g *run) collectRecorded(ctx context.Context, id string, elsewhere bool) error {
	c := g.c
	unlock, ok := g.lockDead(id)
	if !ok {
		return nil
	}
	defer unlock()
	found, _, err := c.Find.WithRecords(g.collects, attachments.Request{ID: id}, nil)
	if err != nil {
		return err
	}
	all := found
	found = slices.DeleteFunc(slices.Clone(found), func(fa attachments.Found) bool {
		return !g.covers(fa.Att.Name()) || g.liveAt(id, fa.Att.IfName) || g.partlyLive(id) && g.siblingLive(id, fa.Att.Name(), all)
	})
	if len(found) == 0 {
		return nil
	}
	if !g.Dry {
		netns, alongside := c.Registry.RecordedNetNS(id, found), g.Only != nil || elsewhere
		d := c.Detacher.Detaching(g.owner, netns, alongside)
		if alongside && netns != "" {
			// The workload stays on other networks: the loopback
			// plugin's DEL must not leave its lo down.
			up, restore := attachments.KeepLoopback(c.Logger, id, netns, found)
			defer restore()
			d.LoUp = up
		}
		if err := d.All(ctx, found); err != nil {
			return err
		}
	}
	for _, fa := range found {
		g.report.addDetached(footprint.Item{Kind: KindRecordedAttachment, ID: id, Network: fa.Att.Name(), Detail: fa.Att.IfName})
	}
	return nil
}

// lockDead takes the lock of the dead allocation id for its collection:
// in this process (waiting for an operation of this process on it), and
// across the host without waiting. ok is false when an operation of this
// process took the id while this GC ran (it is protected), or another
// process holds it: the id is left for the next GC.
func (g *run) lockDead(id string) (unlock func(), ok bool) {
	unlockAdm := g.c.Registry.Admission.LockAll([]string{id})
	if g.c.Registry.Admission.Protected()[id] {
		unlockAdm()
		return nil, false
	}
	unlockID, err := g.c.Registry.Store.TryLockID(id)
	if err != nil {
		unlockAdm()
		g.c.Logger.Debug("GC left a busy allocation alone", "alloc_id", id, "error", err)
		return nil, false
	}
	unlock = func() {
		unlockID()
		unlockAdm()
	}
	if g.recordedSinceStart(id) {
		unlock()
		g.c.Logger.Debug("GC left an allocation recorded while it ran alone", "alloc_id", id)
		return nil, false
	}
	return unlock, true
}

// recordedSinceStart reports whether a record of id was written while
// this GC ran (or the id's records cannot be read): an operation made or
// changed it meanwhile, and it is not this GC's to judge.
func (g *run) recordedSinceStart(id string) bool {
	recs, _, err := g.c.Registry.Store.Of(id)
	if err != nil {
		return true
	}
	return slices.ContainsFunc(recs, func(rec registry.Record) bool { return rec.Updated.After(g.start) })
}
