package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
)

// sweep removes the footprint of every dead attachment of the collected
// networks it can attribute. A sweep that missed a gap in a held xtables
// lock (a busy host's other writer) scans and cleans again while ctx's
// deadline leaves time (attachments.WhileLockHeld): both steps are safe to repeat.
func (g *run) sweep(ctx context.Context) error {
	_, err := attachments.WhileLockHeld(ctx, func() (struct{}, error) { return struct{}{}, g.sweepOnce(ctx) })
	return err
}

// sweepOnce scans the host and cleans what it found dead, holding the
// host's GC lock: no ADD of any process runs between the scan and the
// clean, which judges who holds an address by the scan (an ADD meanwhile
// could reserve an address the scan saw free, and write a rule just like
// a dead one's). Under the lock it reads the registry and libcni's cache
// again: what another owner recorded, or another tool attached, while
// this GC collected unlocked is live.
func (g *run) sweepOnce(ctx context.Context) error {
	c := g.c
	adm := &c.Registry.Admission
	if !g.Dry { // a plan changes nothing: no ADD need wait for it
		unlockGC, err := c.Registry.LockGC(ctx)
		if err != nil {
			return err
		}
		defer unlockGC()
	}
	sweep := footprint.NewSweep(ctx, c.Seams.All())
	sweep.WholeWorkload = g.Only == nil // a dead id is dead on every network, unless GCOptions.Networks spares some
	sweep.DryRun = g.Dry
	found, scanErr := sweep.DiscoverAll()
	g.progress.step("host scanned", len(found))
	claimed, err := g.claimedNow()
	if err != nil {
		return fmt.Errorf("%w: GC sweep of %d network(s) not run: %w", errs.CleanupFailed, len(g.nets), err)
	}
	var dead []footprint.Attachment
	var ids []string
	for _, a := range found {
		if !g.live[a.ID] && !claimed[a.ID] && !g.partlyLive(a.ID) && !g.skipped[a.Network] {
			dead = append(dead, a)
			ids = append(ids, a.ID)
		}
	}
	protected := adm.Protected() // busy now: not ours to judge, and not to wait for
	ids = slices.DeleteFunc(ids, func(id string) bool { return protected[id] })
	unlock := adm.LockAll(ids)
	defer unlock()
	protected = adm.Protected() // started after the scan: not ours to judge
	dead = slices.DeleteFunc(dead, func(a footprint.Attachment) bool { return protected[a.ID] })
	unlockIDs, busy := c.Registry.TryLockIDs(dead) // another process works on them: not ours to judge either
	defer unlockIDs()
	dead = slices.DeleteFunc(dead, func(a footprint.Attachment) bool { return busy[a.ID] })
	err = sweep.CleanAll(dead) // with nothing dead, it still reports what the scan could not read
	g.report.setSwept(sweep.Report())
	g.progress.step("sweep done", sweep.Report().Len())
	if err = errors.Join(scanErr, err); err != nil {
		return fmt.Errorf("%w: GC sweep of %d network(s): %w", errs.CleanupFailed, len(g.nets), err)
	}
	return nil
}

// claimedNow returns the ids whose state the sweep must leave, as the
// registry and libcni's cache say now: another owner's records of this
// boot, records written while this GC ran, registry files this cninet
// cannot read, and cached attachments no record claims whose namespace
// still lives.
func (g *run) claimedNow() (map[string]bool, error) {
	c := g.c
	all, err := c.Registry.Store.All()
	if err != nil {
		return nil, fmt.Errorf("reading the host registry: %w", err)
	}
	claimed := map[string]bool{}
	recorded := map[identity.Key]bool{}
	for _, rec := range all.Records {
		recorded[rec.Key] = true
		if !g.collects(rec) || rec.Updated.After(g.start) { // another's, or recorded while this GC ran
			claimed[rec.ID] = true
		}
	}
	for _, d := range all.Damaged {
		claimed[d.ID] = true
	}
	cached, err := c.Lib.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("reading libcni's cache: %w", err)
	}
	for _, a := range cached {
		if !claimed[a.ContainerID] && !recorded[identity.Key{Network: a.Network, ID: a.ContainerID, IfName: a.IfName}] && !g.ns.Gone(a.NetNS, 0) {
			claimed[a.ContainerID] = true
		}
	}
	return claimed, nil
}
