package cninet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// GC brings the host back to what the live allocations need: in every
// network the Configurator knows, every attachment of this Configurator's
// owner (Config.Owner) whose allocation ID is not in liveAllocIDs is
// removed (an attachment is live when its allocation is, whatever its
// interface). Another owner's attachments, as the host registry records
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
// GCOptions narrow it to some networks, or make it a dry run; at most one
// may be given (ErrInvalidArgument).
func (c *Configurator) GC(ctx context.Context, liveAllocIDs []string, opts ...GCOptions) (*GCReport, error) {
	o, err := optionsOf("GC", opts)
	if err != nil {
		return nil, err
	}
	if o.DryRun {
		ctx = context.WithValue(ctx, gcDryRunKey{}, true)
	}
	if len(o.Networks) == 0 {
		return c.gc(ctx, liveAllocIDs)
	}
	only := make(map[string]bool, len(o.Networks))
	for _, name := range o.Networks {
		if err := checkNetworkName(name); err != nil {
			return nil, err
		}
		if _, err := c.knownConf(name, false); err != nil {
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
	if _, err := c.current(); err != nil {
		return nil, err
	}
	only := gcOnly(ctx)
	nets, skipped := c.gcNetworks(only)
	report := &GCReport{}
	if len(nets) == 0 {
		return report, nil
	}
	live := map[string]bool{}
	for _, id := range liveAllocIDs {
		live[id] = true
	}
	// Allocations busy in this process when GC is called are protected,
	// the ones whose ADD it then waits for included.
	c.adm.BeginGC()
	defer c.adm.EndGC()
	dry := gcDryRun(ctx)
	if !dry { // a plan changes nothing: no ADD need wait for it
		unlockGC, err := c.lockGC(ctx)
		if err != nil {
			return nil, err
		}
		defer unlockGC()
	}
	progress := newGCProgress(c.logger)
	recorded, recErr := c.gcRecorded(ctx, live, only, report, dry)
	progress.step("recorded attachments collected", report.Len())
	sweep := footprint.NewSweep(ctx, c.seams())
	sweep.WholeWorkload = only == nil // a dead id is dead on every network, unless GCOptions.Networks spares some
	sweep.DryRun = dry
	for id := range recorded.others {
		live[id] = true // another owner's, or a damaged record's: never this GC's to judge
	}
	errs := []error{recErr, c.gcCached(ctx, nets, live, report, dry)}
	progress.step("libcni GC done", report.Len())
	errs = append(errs, c.tel.traceSweep(ctx, names(nets), report, func() error { return c.gcSweep(sweep, nets, skipped, live, report, progress) }))
	if dry {
		c.logger.Info("GC dry run: nothing changed", "networks", len(nets), "would_remove", report.Len(), "alloc_ids", report.IDs())
		return report, errors.Join(errs...)
	}
	if n := report.Len(); n > 0 {
		c.logger.Info("GC removed stale attachments", "networks", len(nets), "items", n, "alloc_ids", report.IDs())
	}
	c.tel.gcDone(ctx, report, len(liveAllocIDs))
	return report, errors.Join(errs...)
}

func names(confs []networkConf) []string {
	out := make([]string, len(confs))
	for i, conf := range confs {
		out[i] = conf.info.name
	}
	return out
}

// gcNetworks returns the networks GC covers, and the names of those whose
// conflist sets disableGC or that only (when not nil) leaves out.
func (c *Configurator) gcNetworks(only map[string]bool) (nets []networkConf, skipped map[string]bool) {
	skipped = map[string]bool{}
	for _, conf := range c.knownNetworks() {
		if spared(only, conf.info.name) {
			skipped[conf.info.name] = true
			continue
		}
		if conf.info.disableGC {
			c.logger.Debug("GC skipped: the conflist sets disableGC", "network", conf.info.name)
			skipped[conf.info.name] = true
			continue
		}
		nets = append(nets, conf)
	}
	return nets, skipped
}

// gcCached detaches every stale attachment libcni's cache holds in nets
// (detachCached), then runs libcni's GC of each network with the live,
// protected and busy attachments, and those that could not be detached,
// as the valid ones, under every interface name they may have (a live
// workload's eth1 must not look stale): it DELs nothing cninet did not
// detach itself, and sends the CNI 1.1 GC command where the conflist's
// version allows. No Setup may run meanwhile: the GC command would take
// its half-made attachment for a stale one.
func (c *Configurator) gcCached(ctx context.Context, nets []networkConf, live map[string]bool, report *GCReport, dry bool) (err error) {
	ctx, span := c.tel.startSpan(ctx, spanGCCached)
	defer func() { span.end(err) }()
	defer c.adm.LockGate()()
	ifNames := c.ifNames(len(c.knownNetworks()))
	protected := c.adm.Protected()
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
	for _, a := range before {
		// Connect gives the lowest free name, which can lie beyond ifNames
		// when networks that a Reload dropped still hold lower ones.
		if (live[a.ContainerID] || protected[a.ContainerID]) && !slices.Contains(ifNames, a.IfName) {
			valid = append(valid, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
	}
	names := map[string]bool{}
	var stale []footprint.Attachment
	for _, conf := range nets {
		names[conf.info.name] = true
	}
	for _, a := range before {
		if names[a.Network] && !live[a.ContainerID] && !protected[a.ContainerID] {
			stale = append(stale, footprint.Attachment{Network: a.Network, ID: a.ContainerID})
		}
	}
	// An id another process is working on is not this GC's to judge: its
	// lock is held until libcni's GC is done, or it counts as valid.
	unlockStale, busy := c.tryLockIDs(stale)
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
	if dry { // the plan: what would be detached
		for _, a := range before {
			if names[a.Network] && !live[a.ContainerID] && !protected[a.ContainerID] && !busy[a.ContainerID] {
				report.addCached(GCItem{Kind: GCCachedAttachment, ID: a.ContainerID, Network: a.Network, Detail: a.IfName})
			}
		}
		return nil
	}
	for _, a := range c.detachCached(ctx, before, names, live, protected, busy, report) {
		valid = append(valid, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	var errs []error
	for _, conf := range nets {
		if err := c.lib.GCNetworkList(ctx, conf.list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			errs = append(errs, fmt.Errorf("%w: CNI GC of network %q: %w", ErrCleanupFailed, conf.info.name, err))
		}
	}
	return errors.Join(errs...)
}

// detachCached detaches the stale attachments in before (of the networks
// in names, whose id is neither live, protected nor busy), id by id, as
// Teardown does, and reports each. It returns those it could not detach.
func (c *Configurator) detachCached(ctx context.Context, before []*libcni.NetworkAttachment, names, live, protected, busy map[string]bool, report *GCReport) (failed []*libcni.NetworkAttachment) {
	byID := map[string][]*libcni.NetworkAttachment{}
	for _, a := range before {
		if names[a.Network] && !live[a.ContainerID] && !protected[a.ContainerID] && !busy[a.ContainerID] {
			byID[a.ContainerID] = append(byID[a.ContainerID], a)
		}
	}
	spares := len(names) < len(c.knownNetworks()) // the id may be attached to a network this GC spares
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		var found []foundAttachment
		for _, a := range byID[id] {
			conf, err := c.knownConf(a.Network, true)
			if err != nil {
				continue
			}
			req := cachedCapabilities(cachedRequest(request{id: id}, a), a)
			found = append(found, foundAttachment{att: attachment{conf: conf, ifName: a.IfName}, req: req, cached: true})
		}
		found, err := c.withRecords(c.ownerOf(ctx), request{id: id}, found)
		if err == nil {
			found = slices.DeleteFunc(found, func(fa foundAttachment) bool { return !names[fa.att.name()] })
			err = c.detachAll(ctx, "", found, spares)
		}
		if err != nil {
			c.logger.Warn("GC could not detach a stale attachment; the next GC tries again", "alloc_id", id, "error", err)
			failed = append(failed, byID[id]...)
			continue
		}
		for _, a := range byID[id] {
			report.addCached(GCItem{Kind: GCCachedAttachment, ID: id, Network: a.Network, Detail: a.IfName})
		}
	}
	return failed
}

// gcSweep removes the footprint of every dead attachment of the GC'd
// networks it can attribute.
func (c *Configurator) gcSweep(sweep *footprint.Cleaner, nets []networkConf, skipped, live map[string]bool, report *GCReport, progress *gcProgress) error {
	found, scanErr := sweep.DiscoverAll()
	progress.step("host scanned", len(found))
	var dead []footprint.Attachment
	var ids []string
	for _, a := range found {
		if !live[a.ID] && !skipped[a.Network] {
			dead = append(dead, a)
			ids = append(ids, a.ID)
		}
	}
	protected := c.adm.Protected() // busy now: not ours to judge, and not to wait for
	ids = slices.DeleteFunc(ids, func(id string) bool { return protected[id] })
	unlock := c.adm.LockAll(ids)
	defer unlock()
	protected = c.adm.Protected() // started after the scan: not ours to judge
	dead = slices.DeleteFunc(dead, func(a footprint.Attachment) bool { return protected[a.ID] })
	unlockIDs, busy := c.tryLockIDs(dead) // another process works on them: not ours to judge either
	defer unlockIDs()
	dead = slices.DeleteFunc(dead, func(a footprint.Attachment) bool { return busy[a.ID] })
	err := sweep.CleanAll(dead) // with nothing dead, it still reports what the scan could not read
	report.setSwept(sweep.Report())
	progress.step("sweep done", sweep.Report().Len())
	if err = errors.Join(scanErr, err); err != nil {
		return fmt.Errorf("%w: GC sweep of %d network(s): %w", ErrCleanupFailed, len(nets), err)
	}
	return nil
}

// gcProgress logs how far a GC is once it has run longer than
// gcProgressAfter, so that an operator watching a big sweep sees it move.
type gcProgress struct {
	logger hclog.Logger
	start  time.Time
}

const gcProgressAfter = 3 * time.Second

func newGCProgress(logger hclog.Logger) *gcProgress {
	return &gcProgress{logger: logger, start: time.Now()}
}

func (p *gcProgress) step(what string, n int) {
	if elapsed := time.Since(p.start); elapsed >= gcProgressAfter {
		p.logger.Info("GC progress: "+what, "items", n, "elapsed", elapsed.Round(time.Millisecond))
	}
}

// GCOptions narrow what GC collects, or make it a dry run.
type GCOptions struct {
	// Networks, when not empty, are the only networks collected: in
	// them every attachment whose allocation ID is not live is removed,
	// and what the other networks hold is left alone, whatever its
	// allocation ID, and counts as live — the same container's
	// attachments there included (the dead ones here are detached as
	// Disconnect with ConnectOptions.IfName detaches, whose DEL never
	// reaches the container's other attachments). A CNI runtime's GC
	// command (cni.dev/valid-attachments) has this shape: it lists the
	// live attachments of one network. Each must be a network this
	// Configurator knows (ErrNetworkNotFound before anything runs).
	// Empty: every network.
	Networks []string
	// DryRun plans and changes nothing: the report lists what GC would
	// remove — the recorded and cached attachments it would detach, then
	// every rule, chain, file and device its sweep would remove (some of
	// which the detaches' DELs would remove first) — and no plugin runs.
	// It does not hold the host's GC lock.
	DryRun bool
}

// gcOnlyKey carries GCOptions.Networks through the context to gc.
type gcOnlyKey struct{}

// gcDryRunKey carries GCOptions.DryRun through the context to gc.
type gcDryRunKey struct{}

// gcDryRun reports whether a GC only plans.
func gcDryRun(ctx context.Context) bool {
	dry, _ := ctx.Value(gcDryRunKey{}).(bool)
	return dry
}

// gcOnly returns the networks a GC is narrowed to; nil: every network.
func gcOnly(ctx context.Context) map[string]bool {
	only, _ := ctx.Value(gcOnlyKey{}).(map[string]bool)
	return only
}

// spared reports whether a GC narrowed to only leaves network alone.
func spared(only map[string]bool, network string) bool {
	return only != nil && !only[network]
}

// lockGC takes the host's GC lock alone: no ADD of any process runs while
// this GC does (CNI 1.1). The wait is bounded by ctx.
func (c *Configurator) lockGC(ctx context.Context) (unlock func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	unlock, err = c.reg.LockGC(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("%w: GC: another process's Setup or GC holds the host's GC lock: %w", ErrBusy, err)
	}
	return unlock, nil
}

// tryLockIDs takes, in this process and across the host, the locks of
// the ids of atts that nobody holds, and returns those it could not take:
// another operation is working on them. GC never waits for an id's lock
// while it holds others.
func (c *Configurator) tryLockIDs(atts []footprint.Attachment) (unlock func(), busy map[string]bool) {
	busy = map[string]bool{}
	var unlocks []func()
	done := map[string]bool{}
	for _, a := range atts {
		if done[a.ID] || busy[a.ID] {
			continue
		}
		u, err := c.reg.TryLockID(a.ID)
		if err != nil {
			busy[a.ID] = true
			continue
		}
		done[a.ID] = true
		unlocks = append(unlocks, u)
	}
	return func() {
		for _, u := range unlocks {
			u()
		}
	}, busy
}

// gcRecords is what the host registry says to a GC.
type gcRecords struct {
	// others are the ids no GC of this owner may judge: another owner's
	// records name them, or a registry file that is no usable record does.
	others map[string]bool
}

// gcRecorded collects this owner's recorded attachments whose allocation
// is not live, in the networks GC covers (only; nil: every network):
// each is detached as Teardown detaches, with its recorded conflist, args
// and port mappings, and its record goes when nothing of it is left. An
// id another operation holds is left for later. Another owner's records
// are never touched: their ids are returned, for the rest of GC to count
// as live.
func (c *Configurator) gcRecorded(ctx context.Context, live, only map[string]bool, report *GCReport, dry bool) (gcRecords, error) {
	out := gcRecords{others: map[string]bool{}}
	all, err := c.reg.All()
	if err != nil {
		return out, fmt.Errorf("%w: reading the host registry: %w (its records were not collected)", ErrCleanupFailed, err)
	}
	for _, d := range all.Damaged {
		c.logger.Warn("registry file is no usable record: kept, and its id is not collected", "path", d.Path, "error", d.Err)
		out.others[d.ContainerID] = true
	}
	dead := map[string]bool{}
	for _, rec := range all.Records {
		switch {
		case rec.Owner != c.ownerOf(ctx):
			out.others[rec.ContainerID] = true
		case !live[rec.ContainerID] && !spared(only, rec.Network):
			dead[rec.ContainerID] = true
		}
	}
	protected := c.adm.Protected()
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(dead)) {
		if protected[id] || out.others[id] {
			continue
		}
		if err := c.collectRecorded(ctx, id, only, report, dry); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// collectRecorded detaches the dead id's recorded attachments of this
// owner, unless another operation holds the id.
func (c *Configurator) collectRecorded(ctx context.Context, id string, only map[string]bool, report *GCReport, dry bool) error {
	unlockAdm := c.adm.LockAll([]string{id})
	defer unlockAdm()
	unlockID, err := c.reg.TryLockID(id)
	if err != nil {
		c.logger.Debug("GC left a busy allocation's records alone", "alloc_id", id, "error", err)
		return nil
	}
	defer unlockID()
	found, err := c.withRecords(c.ownerOf(ctx), request{id: id}, nil)
	if err != nil {
		return err
	}
	found = slices.DeleteFunc(found, func(fa foundAttachment) bool { return spared(only, fa.att.name()) })
	if !dry {
		if err := c.detachAll(ctx, "", found, only != nil); err != nil {
			return err
		}
	}
	for _, fa := range found {
		report.addCached(GCItem{Kind: GCRecordedAttachment, ID: id, Network: fa.att.name(), Detail: fa.att.ifName})
	}
	return nil
}
