package cninet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/telemetry"
	"github.com/seed1280861d/cninet/internal/workload"
)

// GC brings the host back to what the live allocations need: every
// attachment of this Configurator's owner (Config.Owner), in every
// network it knows, whose allocation ID is not in liveAllocIDs is
// detached as Teardown detaches it; then a sweep removes, by the
// ownership rule, what no record or cache remembers any more (after a
// crash or a reboot).
//
//   - liveAllocIDs must not be nil; an empty slice means nothing is live.
//     An attachment is live when its allocation is, whatever its
//     interface, or when GCOptions.LiveAttachments names it.
//   - Never collected: another owner's attachments (but those recorded in
//     an earlier boot), allocations set up, checked or torn down while GC
//     runs, state no record claims whose namespace still lives, and the
//     ids of unreadable registry files (GCReport.Unreadable).
//   - Setups of other allocations run meanwhile; no ADD runs while the
//     plugins' GC command and the sweep do (the host's GC lock, waited
//     for until ctx is done: ErrBusy).
//   - GCOptions narrow it to some networks, name live attachments by
//     interface, or make it a dry run; at most one may be given
//     (ErrInvalidArgument). A network whose conflist sets disableGC is
//     skipped. One network's failure does not stop the others; the error
//     joins each.
//
// Its passes, its locks and what the sweep removes: docs/design.md, "GC".
func (c *Configurator) GC(ctx context.Context, liveAllocIDs []string, opts ...GCOptions) (*GCReport, error) {
	o, err := optionsOf("GC", opts)
	if err != nil {
		return nil, err
	}
	scope, err := c.collector.scopeOf(o)
	if err != nil {
		return nil, err
	}
	return c.collector.gc(ctx, liveAllocIDs, scope)
}

// collector is GC: the parts its runs (gcRun) use.
type collector struct {
	owners
	registry *hostRegistry
	nets     *catalog.Networks
	find     *attachmentFinder
	seams    *cleanerSeams
	lib      *libcni.CNIConfig // libcni's cache and the plugins' GC command
	ifs      ifNaming
	tel      *telemetry.Recorder
	logger   hclog.Logger
	detacher *detacher
}

// gc is GC of everything but liveAllocIDs, as scope narrows it.
func (c *collector) gc(ctx context.Context, liveAllocIDs []string, scope gcScope) (_ *GCReport, err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpGC, "", "")
	defer func() { op.End(err) }()
	if liveAllocIDs == nil {
		return nil, fmt.Errorf("%w: nil live set (pass an empty slice when nothing is live)", ErrInvalidArgument)
	}
	if _, err := c.nets.Current(); err != nil {
		return nil, err
	}
	g := c.gcRun(ctx, liveAllocIDs, scope)
	if len(g.nets) == 0 {
		return g.report, nil
	}
	// Allocations busy in this process when GC is called are protected,
	// the ones whose ADD it then waits for included.
	c.registry.adm.BeginGC()
	defer c.registry.adm.EndGC()
	g.progress = newGCProgress(c.logger)
	recErr := g.recorded(ctx)
	g.progress.step("recorded attachments collected", g.report.Len())
	errs := []error{recErr, g.cached(ctx)}
	g.progress.step("libcni GC done", g.report.Len())
	errs = append(errs, c.tel.TraceSweep(ctx, names(g.nets), g.report.Len, func() error { return g.sweep(ctx) }))
	if g.dry {
		c.logger.Info("GC dry run: nothing changed", "networks", len(g.nets), "would_remove", g.report.Len(), "alloc_ids", g.report.IDs())
		return g.report, errors.Join(errs...)
	}
	g.housekeeping()
	if n := g.report.Len(); n > 0 {
		c.logger.Info("GC removed stale attachments", "networks", len(g.nets), "items", n, "alloc_ids", g.report.IDs())
	}
	c.tel.GCDone(ctx, gcItems(g.report), g.report.Len(), len(liveAllocIDs))
	return g.report, errors.Join(errs...)
}

// housekeeping removes what killed processes left in the registry: the
// temporary files of writes cut short, and the lock files of ids that
// have no record (each under its lock).
func (g *gcRun) housekeeping() {
	store := g.c.registry.store
	if n := store.RemoveStaleTemps(); n > 0 {
		g.c.logger.Info("GC removed temporary files of registry writes cut short", "files", n, "state_dir", store.Dir())
	}
	if n := store.RemoveUnusedLocks(); n > 0 {
		g.c.logger.Debug("GC removed lock files of ids without a record", "files", n, "state_dir", store.Dir())
	}
}

func names(confs []catalog.Conf) []string {
	out := make([]string, len(confs))
	for i, conf := range confs {
		out[i] = conf.Info.Name
	}
	return out
}

// gcRun is one GC: what is live, which networks it collects, and what it
// removed.
type gcRun struct {
	c       *collector
	owner   string          // whose dead attachments it collects
	live    map[string]bool // ids not to collect: the caller's live ones, then every id another owner's record names
	gcScope                 // what GCOptions ask: the networks, the live interfaces, a dry run
	// nets are the networks collected; skipped, by name, those left
	// alone: spared by only, or their conflist sets disableGC.
	nets     []catalog.Conf
	skipped  map[string]bool
	report   *GCReport
	progress *gcProgress // from when the GC begins
	// start is when the GC began: a record written since is another
	// operation's, made or changed while this GC collected unlocked (a
	// Setup of the same owner in another process, say), which the
	// caller's live set, older, does not speak for.
	start time.Time
	ns    workload.Probe // whether the namespaces of unrecorded and other owners' state are gone
}

// covers reports whether this GC collects in network: one this
// Configurator knows, not spared by GCOptions.Networks, not disableGC.
// Another Configurator of the same owner may know networks this one does
// not: what it recorded there is its to collect.
func (g *gcRun) covers(network string) bool {
	return slices.ContainsFunc(g.nets, func(conf catalog.Conf) bool { return conf.Info.Name == network })
}

// gcRun starts a GC of everything but liveAllocIDs, as scope narrows it,
// for ctx's owner (WithOwner, else Config.Owner).
func (c *collector) gcRun(ctx context.Context, liveAllocIDs []string, scope gcScope) *gcRun {
	g := &gcRun{c: c, owner: c.ownerOf(ctx), live: map[string]bool{}, gcScope: scope,
		skipped: map[string]bool{}, report: &GCReport{}, start: time.Now()}
	for _, id := range liveAllocIDs {
		g.live[id] = true
	}
	for _, conf := range c.nets.All(false) {
		if spared(g.only, conf.Info.Name) {
			g.skipped[conf.Info.Name] = true
			continue
		}
		if conf.Info.DisableGC {
			c.logger.Debug("GC skipped: the conflist sets disableGC", "network", conf.Info.Name)
			g.skipped[conf.Info.Name] = true
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
