package gc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// Collect is GC of everything but liveAllocIDs, as scope narrows it.
func (c *Collector) Collect(ctx context.Context, liveAllocIDs []string, scope Scope) (_ *Report, err error) {
	ctx, op := c.Tel.StartOp(ctx, telemetry.OpGC, "", "")
	defer func() { op.End(err) }()
	if liveAllocIDs == nil {
		return nil, fmt.Errorf("%w: nil live set (pass an empty slice when nothing is live)", errs.InvalidArgument)
	}
	if _, err := c.Nets.Current(); err != nil {
		return nil, err
	}
	g := c.newRun(ctx, liveAllocIDs, scope)
	if len(g.nets) == 0 {
		return g.report, nil
	}
	// Allocations busy in this process when GC is called are protected,
	// the ones whose ADD it then waits for included.
	c.Registry.Admission.BeginGC()
	defer c.Registry.Admission.EndGC()
	g.progress = newProgress(c.Logger)
	recErr := g.recorded(ctx)
	g.progress.step("recorded attachments collected", g.report.Len())
	failed := []error{recErr, g.cached(ctx)}
	g.progress.step("libcni GC done", g.report.Len())
	failed = append(failed, c.Tel.TraceSweep(ctx, confNames(g.nets), g.report.Len, func() error { return g.sweep(ctx) }))
	if g.Dry {
		c.Logger.Info("GC dry run: nothing changed", "networks", len(g.nets), "would_remove", g.report.Len(), "alloc_ids", g.report.IDs())
		return g.report, errors.Join(failed...)
	}
	g.housekeeping()
	if n := g.report.Len(); n > 0 {
		c.Logger.Info("GC removed stale attachments", "networks", len(g.nets), "items", n, "alloc_ids", g.report.IDs())
	}
	c.Tel.GCDone(ctx, g.report.items(), g.report.Len(), len(liveAllocIDs))
	return g.report, errors.Join(failed...)
}

func confNames(confs []catalog.Conf) []string {
	out := make([]string, len(confs))
	for i, conf := range confs {
		out[i] = conf.Info.Name
	}
	return out
}

// newRun starts a GC of everything but liveAllocIDs, as scope narrows it,
// for ctx's owner (WithOwner, else Config.Owner).
func (c *Collector) newRun(ctx context.Context, liveAllocIDs []string, scope Scope) *run {
	g := &run{c: c, owner: c.OwnerOf(ctx), live: map[string]bool{}, Scope: scope,
		skipped: map[string]bool{}, report: &Report{}, start: time.Now()}
	for _, id := range liveAllocIDs {
		g.live[id] = true
	}
	for _, conf := range c.Nets.All(false) {
		if spared(g.Only, conf.Info.Name) {
			g.skipped[conf.Info.Name] = true
			continue
		}
		if conf.Info.DisableGC {
			c.Logger.Debug("GC skipped: the conflist sets disableGC", "network", conf.Info.Name)
			g.skipped[conf.Info.Name] = true
			continue
		}
		g.nets = append(g.nets, conf)
	}
	return g
}
