package cninet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

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
	c.registry.Admission.BeginGC()
	defer c.registry.Admission.EndGC()
	g.progress = newGCProgress(c.logger)
	recErr := g.recorded(ctx)
	g.progress.step("recorded attachments collected", g.report.Len())
	errs := []error{recErr, g.cached(ctx)}
	g.progress.step("libcni GC done", g.report.Len())
	errs = append(errs, c.tel.TraceSweep(ctx, confNames(g.nets), g.report.Len, func() error { return g.sweep(ctx) }))
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

func confNames(confs []catalog.Conf) []string {
	out := make([]string, len(confs))
	for i, conf := range confs {
		out[i] = conf.Info.Name
	}
	return out
}

// gcRun starts a GC of everything but liveAllocIDs, as scope narrows it,
// for ctx's owner (WithOwner, else Config.Owner).
func (c *collector) gcRun(ctx context.Context, liveAllocIDs []string, scope gcScope) *gcRun {
	g := &gcRun{c: c, owner: c.OwnerOf(ctx), live: map[string]bool{}, gcScope: scope,
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

// scopeOf checks o and returns the GC it asks for: every network it names
// known, every live attachment a container ID and an interface name
// (ErrInvalidArgument, ErrNetworkNotFound).
func (c *collector) scopeOf(o GCOptions) (gcScope, error) {
	s := gcScope{dry: o.DryRun}
	for _, a := range o.LiveAttachments {
		if !footprint.IsContainerID(a.ID) || CheckIfName(a.IfName) != nil {
			return gcScope{}, fmt.Errorf("%w: GCOptions.LiveAttachments names allocation %q as interface %q, want a CNI container ID and an interface name",
				ErrInvalidArgument, a.ID, a.IfName)
		}
		if s.liveIfs == nil {
			s.liveIfs = map[string]map[string]bool{}
		}
		if s.liveIfs[a.ID] == nil {
			s.liveIfs[a.ID] = map[string]bool{}
		}
		s.liveIfs[a.ID][a.IfName] = true
	}
	if len(o.Networks) == 0 {
		return s, nil
	}
	s.only = make(map[string]bool, len(o.Networks))
	for _, name := range o.Networks {
		if err := catalog.CheckName(name); err != nil {
			return gcScope{}, err
		}
		if _, err := c.nets.Known(name, false); err != nil {
			return gcScope{}, fmt.Errorf("%w (GC)", err)
		}
		s.only[name] = true
	}
	return s, nil
}
