package cninet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// GC brings the host back to what the live allocations need: in every
// network the Configurator knows, every attachment of this Configurator's
// owner (Config.Owner) whose allocation ID is not in liveAllocIDs is
// removed (an attachment is live when its allocation is, whatever its
// interface, or when GCOptions.LiveAttachments names it by interface). Another owner's attachments, as the host registry records
// them, are never collected, whatever liveAllocIDs says: each process on
// a host collects its own. First the dead attachments the registry
// records, then those libcni's cache still holds, are detached as
// Teardown detaches them (DEL and force cleanup; the CNI 1.1 GC command
// is then sent where the conflist's version allows); then a sweep removes
// what no record or cache remembers any more — the usual case after a
// crash or reboot, or state from before the registry — by the ownership
// rule: rules and chains whose comment or derived name proves a dead
// owner, firewall and hostport rules of addresses only a dead owner held,
// reservations, cached results (empty or cut ones too), tuning files and
// bandwidth devices of dead owners. No DEL of a dead attachment can take
// anything of a live one (the prevention rule).
//
// liveAllocIDs must not be nil (an empty slice means nothing is live).
// Allocations this Configurator is setting up, checking or tearing down
// when GC starts, or starts to while it runs, are never collected, nor
// are those another process holds the lock of. GC holds the host's GC
// lock: no Setup or Connect of any process runs its ADD meanwhile (GC
// waits for those under way, until ctx is done: ErrBusy). A registry
// file that is no usable record (corrupt, or of a newer cninet) is kept
// and logged, and nothing of its id is collected. A network whose
// conflist sets disableGC is skipped. A sweep that runs longer than a few
// seconds logs its progress at Info. One network's failure does not stop
// the others; the error joins each.
//
// GCOptions narrow it to some networks, name live attachments by
// interface, or make it a dry run; at most one may be given
// (ErrInvalidArgument).
func (c *Configurator) GC(ctx context.Context, liveAllocIDs []string, opts ...GCOptions) (*GCReport, error) {
	o, err := optionsOf("GC", opts)
	if err != nil {
		return nil, err
	}
	if o.DryRun {
		ctx = context.WithValue(ctx, gcDryRunKey{}, true)
	}
	if len(o.LiveAttachments) > 0 {
		live := map[string]map[string]bool{}
		for _, a := range o.LiveAttachments {
			if !footprint.IsContainerID(a.ID) || CheckIfName(a.IfName) != nil {
				return nil, fmt.Errorf("%w: GCOptions.LiveAttachments names allocation %q as interface %q, want a CNI container ID and an interface name",
					ErrInvalidArgument, a.ID, a.IfName)
			}
			if live[a.ID] == nil {
				live[a.ID] = map[string]bool{}
			}
			live[a.ID][a.IfName] = true
		}
		ctx = context.WithValue(ctx, gcLiveKey{}, live)
	}
	if len(o.Networks) == 0 {
		return c.gc(ctx, liveAllocIDs)
	}
	only := make(map[string]bool, len(o.Networks))
	for _, name := range o.Networks {
		if err := checkNetworkName(name); err != nil {
			return nil, err
		}
		if _, err := c.nets.known(name, false); err != nil {
			return nil, fmt.Errorf("%w (GC)", err)
		}
		only[name] = true
	}
	return c.gc(context.WithValue(ctx, gcOnlyKey{}, only), liveAllocIDs)
}

// gc is GC, narrowed and dry or not as ctx says (gcOnly, gcDryRun).
func (c *Configurator) gc(ctx context.Context, liveAllocIDs []string) (_ *GCReport, err error) {
	ctx, op := c.tel.startOp(ctx, opGC, "", "")
	defer func() { op.end(err) }()
	if liveAllocIDs == nil {
		return nil, fmt.Errorf("%w: nil live set (pass an empty slice when nothing is live)", ErrInvalidArgument)
	}
	if _, err := c.nets.current(); err != nil {
		return nil, err
	}
	g := c.gcRun(ctx, liveAllocIDs)
	if len(g.nets) == 0 {
		return g.report, nil
	}
	// Allocations busy in this process when GC is called are protected,
	// the ones whose ADD it then waits for included.
	c.registry.adm.BeginGC()
	defer c.registry.adm.EndGC()
	if !g.dry { // a plan changes nothing: no ADD need wait for it
		unlockGC, err := c.registry.lockGC(ctx)
		if err != nil {
			return nil, err
		}
		defer unlockGC()
	}
	g.progress = newGCProgress(c.logger)
	recErr := g.recorded(ctx)
	g.progress.step("recorded attachments collected", g.report.Len())
	sweep := footprint.NewSweep(ctx, c.seams.all())
	sweep.WholeWorkload = g.only == nil // a dead id is dead on every network, unless GCOptions.Networks spares some
	sweep.DryRun = g.dry
	errs := []error{recErr, g.cached(ctx)}
	g.progress.step("libcni GC done", g.report.Len())
	errs = append(errs, c.tel.traceSweep(ctx, names(g.nets), g.report, func() error { return g.sweep(ctx, sweep) }))
	if g.dry {
		c.logger.Info("GC dry run: nothing changed", "networks", len(g.nets), "would_remove", g.report.Len(), "alloc_ids", g.report.IDs())
		return g.report, errors.Join(errs...)
	}
	if n := g.report.Len(); n > 0 {
		c.logger.Info("GC removed stale attachments", "networks", len(g.nets), "items", n, "alloc_ids", g.report.IDs())
	}
	c.tel.gcDone(ctx, g.report, len(liveAllocIDs))
	return g.report, errors.Join(errs...)
}

func names(confs []networkConf) []string {
	out := make([]string, len(confs))
	for i, conf := range confs {
		out[i] = conf.info.name
	}
	return out
}

// gcRun is one GC: what is live, which networks it collects, and what it
// removed.
type gcRun struct {
	c     *Configurator
	owner string          // whose dead attachments it collects
	live  map[string]bool // ids not to collect: the caller's live ones, then every id another owner's record names
	// liveIfs are GCOptions.LiveAttachments: the interfaces of each id
	// that are live (its others are not).
	liveIfs map[string]map[string]bool
	only    map[string]bool // GCOptions.Networks; nil: every network
	dry     bool            // plan only (GCOptions.DryRun)
	// nets are the networks collected; skipped, by name, those left
	// alone: spared by only, or their conflist sets disableGC.
	nets     []networkConf
	skipped  map[string]bool
	report   *GCReport
	progress *gcProgress // from when the GC holds its locks
}

// covers reports whether this GC collects in network: one this
// Configurator knows, not spared by GCOptions.Networks, not disableGC.
// Another Configurator of the same owner may know networks this one does
// not: what it recorded there is its to collect.
func (g *gcRun) covers(network string) bool {
	return slices.ContainsFunc(g.nets, func(conf networkConf) bool { return conf.info.name == network })
}

// gcRun starts a GC under ctx (GCOptions' networks and dry run, WithOwner's
// owner) of everything but liveAllocIDs.
func (c *Configurator) gcRun(ctx context.Context, liveAllocIDs []string) *gcRun {
	g := &gcRun{c: c, owner: c.ownerOf(ctx), live: map[string]bool{}, only: gcOnly(ctx), dry: gcDryRun(ctx),
		skipped: map[string]bool{}, report: &GCReport{}}
	g.liveIfs, _ = ctx.Value(gcLiveKey{}).(map[string]map[string]bool)
	for _, id := range liveAllocIDs {
		g.live[id] = true
	}
	for _, conf := range c.nets.all(false) {
		if spared(g.only, conf.info.name) {
			g.skipped[conf.info.name] = true
			continue
		}
		if conf.info.disableGC {
			c.logger.Debug("GC skipped: the conflist sets disableGC", "network", conf.info.name)
			g.skipped[conf.info.name] = true
			continue
		}
		g.nets = append(g.nets, conf)
	}
	return g
}

// liveAt reports whether the attachment of id as ifName is live: its id
// is, or GCOptions.LiveAttachments names it.
func (g *gcRun) liveAt(id, ifName string) bool {
	return g.live[id] || g.liveIfs[id][ifName]
}

// partlyLive reports whether GCOptions.LiveAttachments names some of
// id's interfaces: the id keeps those.
func (g *gcRun) partlyLive(id string) bool { return len(g.liveIfs[id]) > 0 }

// siblingLive reports whether network holds, besides the attachment,
// one of id's live interfaces, by the registry or libcni's cache: its
// force cleanup, which acts on id in network, would reach that one.
func (g *gcRun) siblingLive(id, network string, recs []foundAttachment) bool {
	for ifName := range g.liveIfs[id] {
		if g.c.find.cachedAt(id, network, ifName) != nil || g.c.registry.recorded(id, network, ifName) != nil {
			return true
		}
	}
	for _, fa := range recs {
		if fa.att.name() == network && g.liveIfs[id][fa.att.ifName] {
			return true
		}
	}
	return false
}

// cached detaches every stale attachment libcni's cache holds in the
// collected networks (detachCached), then runs libcni's GC of each
// network with the live, protected and busy attachments, and those that
// could not be detached, as the valid ones, under every interface name
// they may have (a live workload's eth1 must not look stale): it DELs
// nothing cninet did not detach itself, and sends the CNI 1.1 GC command
// where the conflist's version allows. No Setup may run meanwhile: the
// GC command would take its half-made attachment for a stale one.
func (g *gcRun) cached(ctx context.Context) (err error) {
	c, live := g.c, g.live
	ctx, span := c.tel.startSpan(ctx, spanGCCached)
	defer func() { span.end(err) }()
	defer c.registry.adm.LockGate()()
	ifNames := c.ifs.all(len(c.nets.all(false)))
	protected := c.registry.adm.Protected()
	before, err := c.lib.GetCachedAttachments("")
	if err != nil {
		return fmt.Errorf("%w: reading libcni's cache: %w (libcni's GC not run)", ErrCleanupFailed, err)
	}
	valid := []types.GCAttachment{}
	for _, ids := range []map[string]bool{live, protected} {
		for id := range ids {
			for _, ifName := range ifNames {
				valid = append(valid, types.GCAttachment{ContainerID: id, IfName: ifName})
			}
		}
	}
	for id, ifs := range g.liveIfs {
		for ifName := range ifs {
			valid = append(valid, types.GCAttachment{ContainerID: id, IfName: ifName})
		}
	}
	for _, a := range before {
		// Connect gives the lowest free name, which can lie beyond ifNames
		// when networks that a Reload dropped still hold lower ones.
		if (live[a.ContainerID] || protected[a.ContainerID]) && !slices.Contains(ifNames, a.IfName) {
			valid = append(valid, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
	}
	// A dead interface of a partly live id whose network also holds a
	// live one is kept (siblingLive): its cleanup would reach the live one.
	kept := map[*libcni.NetworkAttachment]bool{}
	for _, a := range before {
		if g.partlyLive(a.ContainerID) && !g.liveAt(a.ContainerID, a.IfName) && g.siblingLive(a.ContainerID, a.Network, nil) {
			c.logger.Warn("GC kept an attachment the caller did not name live: the same network holds a live interface of its allocation, which its cleanup would reach",
				"alloc_id", a.ContainerID, "network", a.Network, "if_name", a.IfName)
			kept[a] = true
			valid = append(valid, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
	}
	stale := func(a *libcni.NetworkAttachment) bool {
		return !g.liveAt(a.ContainerID, a.IfName) && !protected[a.ContainerID] && !kept[a]
	}
	names := map[string]bool{}
	var staleAtts []footprint.Attachment
	for _, conf := range g.nets {
		names[conf.info.name] = true
	}
	for _, a := range before {
		if names[a.Network] && stale(a) {
			staleAtts = append(staleAtts, footprint.Attachment{Network: a.Network, ID: a.ContainerID})
		}
	}
	// An id another process is working on is not this GC's to judge: its
	// lock is held until libcni's GC is done, or it counts as valid.
	unlockStale, busy := c.registry.tryLockIDs(staleAtts)
	defer unlockStale()
	for id := range busy {
		for _, ifName := range ifNames {
			valid = append(valid, types.GCAttachment{ContainerID: id, IfName: ifName})
		}
	}
	// Every stale attachment is detached as Teardown detaches it (the
	// prevention rule, its proof recorded in the registry first), not by
	// libcni's GC, whose DEL runs the whole chain: portmap's nftables DEL
	// would take the same id's rules on a network this GC spares. What
	// could not be detached is left for the next GC: libcni's GC is told
	// it is valid.
	if g.dry { // the plan: what would be detached
		for _, a := range before {
			if names[a.Network] && stale(a) && !busy[a.ContainerID] {
				g.report.addCached(GCItem{Kind: GCCachedAttachment, ID: a.ContainerID, Network: a.Network, Detail: a.IfName})
			}
		}
		return nil
	}
	for _, a := range g.detachCached(ctx, before, names, func(a *libcni.NetworkAttachment) bool { return stale(a) && !busy[a.ContainerID] }) {
		valid = append(valid, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	var errs []error
	for _, conf := range g.nets {
		if err := c.lib.GCNetworkList(ctx, conf.list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			errs = append(errs, fmt.Errorf("%w: CNI GC of network %q: %w", ErrCleanupFailed, conf.info.name, err))
		}
	}
	return errors.Join(errs...)
}

// detachCached detaches the stale attachments in before (of the networks
// in names, neither live, protected nor busy), id by id, as Teardown
// does, and reports each. It returns those it could not detach.
func (g *gcRun) detachCached(ctx context.Context, before []*libcni.NetworkAttachment, names map[string]bool, stale func(*libcni.NetworkAttachment) bool) (failed []*libcni.NetworkAttachment) {
	c := g.c
	byID := map[string][]*libcni.NetworkAttachment{}
	for _, a := range before {
		if names[a.Network] && stale(a) {
			byID[a.ContainerID] = append(byID[a.ContainerID], a)
		}
	}
	spares := len(names) < len(c.nets.all(false)) // the id may be attached to a network this GC spares
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		var found []foundAttachment
		for _, a := range byID[id] {
			conf, err := c.nets.known(a.Network, true)
			if err != nil {
				continue
			}
			req := cachedCapabilities(cachedRequest(request{id: id}, a), a)
			found = append(found, foundAttachment{att: attachment{conf: conf, ifName: a.IfName}, req: req, cached: true})
		}
		found, err := c.find.withRecords(g.owner, request{id: id}, found)
		if err == nil {
			all := found
			found = slices.DeleteFunc(slices.Clone(found), func(fa foundAttachment) bool {
				return !names[fa.att.name()] || g.liveAt(id, fa.att.ifName) || g.partlyLive(id) && g.siblingLive(id, fa.att.name(), all)
			})
			err = c.detaching(g.owner, "", spares || g.partlyLive(id)).all(ctx, found)
		}
		if err != nil {
			c.logger.Warn("GC could not detach a stale attachment; the next GC tries again", "alloc_id", id, "error", err)
			failed = append(failed, byID[id]...)
			continue
		}
		for _, a := range byID[id] {
			g.report.addCached(GCItem{Kind: GCCachedAttachment, ID: id, Network: a.Network, Detail: a.IfName})
		}
	}
	return failed
}

// sweep removes the footprint of every dead attachment of the collected
// networks it can attribute. A sweep that missed a gap in a held xtables
// lock (a busy host's other writer) scans and cleans again while ctx's
// deadline leaves time (whileLockHeld): both steps are safe to repeat.
func (g *gcRun) sweep(ctx context.Context, sweep *footprint.Cleaner) error {
	_, err := whileLockHeld(ctx, func() (struct{}, error) { return struct{}{}, g.sweepOnce(sweep) })
	return err
}

// sweepOnce scans the host and cleans what it found dead.
func (g *gcRun) sweepOnce(sweep *footprint.Cleaner) error {
	adm := &g.c.registry.adm
	found, scanErr := sweep.DiscoverAll()
	g.progress.step("host scanned", len(found))
	var dead []footprint.Attachment
	var ids []string
	for _, a := range found {
		if !g.live[a.ID] && !g.partlyLive(a.ID) && !g.skipped[a.Network] {
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
	unlockIDs, busy := g.c.registry.tryLockIDs(dead) // another process works on them: not ours to judge either
	defer unlockIDs()
	dead = slices.DeleteFunc(dead, func(a footprint.Attachment) bool { return busy[a.ID] })
	err := sweep.CleanAll(dead) // with nothing dead, it still reports what the scan could not read
	g.report.setSwept(sweep.Report())
	g.progress.step("sweep done", sweep.Report().Len())
	if err = errors.Join(scanErr, err); err != nil {
		return fmt.Errorf("%w: GC sweep of %d network(s): %w", ErrCleanupFailed, len(g.nets), err)
	}
	return nil
}

// recorded collects this owner's recorded attachments whose allocation
// is not live, in the networks GC covers: each is detached as Teardown
// detaches, with its recorded conflist, args and port mappings, and its
// record goes when nothing of it is left. An id another operation holds
// is left for later. Another owner's records are never touched: their
// ids, and those a registry file that is no usable record names, count
// as live for the rest of the GC. Nor are this owner's records of
// networks this Configurator does not know (another Configurator of the
// same owner knows them, or a Teardown naming the network finishes
// them): their ids count as live too.
func (g *gcRun) recorded(ctx context.Context) error {
	c := g.c
	all, err := c.registry.store.All()
	if err != nil {
		return fmt.Errorf("%w: reading the host registry: %w (its records were not collected)", ErrCleanupFailed, err)
	}
	others := map[string]bool{} // no GC of this owner may judge them
	for _, d := range all.Damaged {
		c.logger.Warn("registry file is no usable record: kept, and its id is not collected", "path", d.Path, "error", d.Err)
		others[d.ContainerID] = true
	}
	dead := map[string]bool{}
	elsewhere := map[string]bool{} // ids this owner recorded on networks this GC does not cover
	unjudged := map[string]bool{}  // of those, the ids whose other state this GC leaves alone
	for _, rec := range all.Records {
		switch {
		case rec.Owner != g.owner:
			others[rec.ContainerID] = true
		case !g.covers(rec.Network):
			elsewhere[rec.ContainerID] = true
			if _, err := c.nets.known(rec.Network, false); err == nil && g.only != nil {
				// Spared by GCOptions.Networks: the narrowed GC keeps
				// away from that network by itself.
				continue
			}
			// A network this Configurator does not know (another
			// Configurator of the same owner attached it), or one
			// whose conflist sets disableGC: the id lives there, so
			// none of its other state is this GC's to judge.
			unjudged[rec.ContainerID] = true
		case !g.liveAt(rec.ContainerID, rec.IfName):
			dead[rec.ContainerID] = true
		}
	}
	protected := c.registry.adm.Protected()
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(dead)) {
		if protected[id] || others[id] {
			continue
		}
		if err := g.collectRecorded(ctx, id, elsewhere[id] || g.partlyLive(id)); err != nil {
			errs = append(errs, err)
		}
	}
	for id := range others {
		g.live[id] = true // another owner's, or a damaged record's: never this GC's to judge
	}
	for id := range unjudged {
		g.live[id] = true // attached where this GC does not look: its other state is not this GC's to judge
	}
	return errors.Join(errs...)
}

// collectRecorded detaches the dead id's recorded attachments of this
// owner in the networks this GC covers, unless another operation holds
// the id; elsewhere says the id keeps attachments in others. Its DEL
// enters the recorded namespace only while that is provably still the
// attachment's (recordedNetNS).
func (g *gcRun) collectRecorded(ctx context.Context, id string, elsewhere bool) error {
	c := g.c
	unlockAdm := c.registry.adm.LockAll([]string{id})
	defer unlockAdm()
	unlockID, err := c.registry.store.TryLockID(id)
	if err != nil {
		c.logger.Debug("GC left a busy allocation's records alone", "alloc_id", id, "error", err)
		return nil
	}
	defer unlockID()
	found, err := c.find.withRecords(g.owner, request{id: id}, nil)
	if err != nil {
		return err
	}
	all := found
	found = slices.DeleteFunc(slices.Clone(found), func(fa foundAttachment) bool {
		return !g.covers(fa.att.name()) || g.liveAt(id, fa.att.ifName) || g.partlyLive(id) && g.siblingLive(id, fa.att.name(), all)
	})
	if len(found) == 0 {
		return nil
	}
	if !g.dry {
		netns, alongside := c.registry.recordedNetNS(id, found), g.only != nil || elsewhere
		d := c.detaching(g.owner, netns, alongside)
		if alongside && netns != "" {
			// The workload stays on other networks: the loopback
			// plugin's DEL must not leave its lo down.
			up, restore := keepLoopback(c.logger, id, netns, found)
			defer restore()
			d.loUp = up
		}
		if err := d.all(ctx, found); err != nil {
			return err
		}
	}
	for _, fa := range found {
		g.report.addCached(GCItem{Kind: GCRecordedAttachment, ID: id, Network: fa.att.name(), Detail: fa.att.ifName})
	}
	return nil
}
