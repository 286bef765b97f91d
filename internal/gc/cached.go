package gc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// cached detaches every stale attachment libcni's cache holds in the
// collected networks, id by id under each id's lock (collectCached), then
// sends the plugins the CNI 1.1 GC command (cniGC). A cached attachment
// is stale when it is neither live, protected, nor kept because the same
// network holds a live interface of its id; one that no record claims
// is collected only when its namespace is gone (another tool's live
// workload, or a cninet's with another StateDir, is never taken).
// Another owner's are not stale: recorded made their ids live.
func (g *run) cached(ctx context.Context) (err error) {
	c := g.c
	ctx, span := c.Tel.StartSpan(ctx, telemetry.SpanGCCached)
	defer func() { span.End(err) }()
	before, err := c.Lib.GetCachedAttachments("")
	if err != nil {
		return fmt.Errorf("%w: reading libcni's cache: %w (libcni's GC not run)", errs.CleanupFailed, err)
	}
	protected := c.Registry.Admission.Protected()
	names := map[string]bool{}
	for _, conf := range g.nets {
		names[conf.Info.Name] = true
	}
	byID := map[string][]*libcni.NetworkAttachment{}
	for _, a := range before {
		if !names[a.Network] || g.liveAt(a.ContainerID, a.IfName) || protected[a.ContainerID] {
			continue
		}
		// A dead interface of a partly live id whose network also holds
		// a live one is kept: its cleanup would reach the live one.
		if g.partlyLive(a.ContainerID) && g.siblingLive(a.ContainerID, a.Network, nil) {
			c.Logger.Warn("GC kept an attachment the caller did not name live: the same network holds a live interface of its allocation, which its cleanup would reach",
				"alloc_id", a.ContainerID, "network", a.Network, "if_name", a.IfName)
			continue
		}
		byID[a.ContainerID] = append(byID[a.ContainerID], a)
	}
	spares := len(names) < len(c.Nets.All(false)) // the id may be attached to a network this GC spares
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		g.collectCached(ctx, id, byID[id], names, spares)
	}
	return g.cniGC(ctx)
}

// collectCached detaches id's stale cached attachments atts (of the
// networks in names) as Teardown does, under id's lock, and reports
// each; an id another operation holds is left for the next GC, and so is
// one whose detach failed. Every stale attachment is detached this way
// (the prevention rule, its proof recorded in the registry first), never
// by libcni's GC, whose DEL runs the whole chain: portmap's nftables DEL
// would take the same id's rules on a network this GC spares.
func (g *run) collectCached(ctx context.Context, id string, atts []*libcni.NetworkAttachment, names map[string]bool, spares bool) {
	c := g.c
	unlock, ok := g.lockDead(id)
	if !ok {
		return
	}
	defer unlock()
	if g.holdsLiveUnrecorded(ctx, id) {
		g.live[id] = true // its state is not this GC's to judge, on any network
		return
	}
	var found []attachments.Found
	for _, a := range atts {
		conf, err := c.Nets.Known(a.Network, true)
		if err != nil {
			continue
		}
		req := attachments.CachedCapabilities(attachments.CachedRequest(attachments.Request{ID: id}, a), a)
		found = append(found, attachments.Found{Att: attachments.Attachment{Conf: conf, IfName: a.IfName}, Req: req, Cached: true})
	}
	found, _, err := c.Find.WithRecords(g.collects, attachments.Request{ID: id}, found)
	if err == nil {
		all := found
		found = slices.DeleteFunc(slices.Clone(found), func(fa attachments.Found) bool {
			return !names[fa.Att.Name()] || g.liveAt(id, fa.Att.IfName) || g.partlyLive(id) && g.siblingLive(id, fa.Att.Name(), all)
		})
		if !g.Dry {
			err = c.Detacher.Detaching(g.owner, "", spares || g.partlyLive(id)).All(ctx, found)
		}
	}
	if err != nil {
		c.Logger.Warn("GC could not detach a stale attachment; the next GC tries again", "alloc_id", id, "error", err)
		return
	}
	for _, fa := range found {
		g.report.addDetached(footprint.Item{Kind: KindCachedAttachment, ID: id, Network: fa.Att.Name(), Detail: fa.Att.IfName})
	}
}

// holdsLiveUnrecorded reports whether libcni's cache holds an
// attachment of id, on any network, that no record claims (nor a
// registry file this cninet cannot read) and whose namespace still
// lives: another tool's workload, a cninet's with another StateDir, or
// one from before the registry. The caller's live set does not speak
// for it, so nothing of the id is this GC's to judge. An id whose
// records or cache cannot be read counts as holding one.
func (g *run) holdsLiveUnrecorded(ctx context.Context, id string) bool {
	c := g.c
	recs, damaged, err := c.Registry.Store.Of(id)
	if err != nil {
		return true
	}
	cached, err := c.Lib.GetCachedAttachments(id)
	if err != nil {
		return true
	}
	for _, a := range cached {
		k := identity.Key{Network: a.Network, ID: id, IfName: a.IfName}
		if slices.ContainsFunc(recs, func(rec registry.Record) bool { return rec.Key == k }) ||
			slices.ContainsFunc(damaged, func(d registry.Damaged) bool { return d.Covers(k) }) ||
			g.ns.Gone(a.NetNS, 0) {
			continue
		}
		c.Logger.Info("GC kept a cached attachment no record claims, and its allocation: its namespace lives (another tool's workload, or one from before the registry)",
			"alloc_id", id, "network", a.Network, "if_name", a.IfName, "netns", a.NetNS)
		c.Tel.Kept(ctx, telemetry.KeptUnrecorded, a.Network)
		return true
	}
	return false
}

// cniGC sends the CNI 1.1 GC command to the plugins of every collected
// network whose conflist's version has it, holding the host's GC lock
// (no ADD of any process runs meanwhile: the plugins would take its
// half-made attachment for a stale one) and this process's gate. The
// valid attachments are everything libcni's cache holds then — what this
// GC detached is gone from it; what it kept, could not detach or left to
// a busy operation is there — and the live, protected and named ones
// under every interface name they may have (a live workload's eth1 must
// not look stale): libcni's GC itself then DELs nothing.
func (g *run) cniGC(ctx context.Context) error {
	c := g.c
	var lists []catalog.Conf
	for _, conf := range g.nets {
		if at, _ := version.GreaterThanOrEqualTo(conf.List.CNIVersion, "1.1.0"); at {
			lists = append(lists, conf)
		}
	}
	if g.Dry || len(lists) == 0 {
		return nil
	}
	unlockGC, err := c.Registry.LockGC(ctx)
	if err != nil {
		return err
	}
	defer unlockGC()
	defer c.Registry.Admission.LockGate()()
	cached, err := c.Lib.GetCachedAttachments("")
	if err != nil {
		return fmt.Errorf("%w: reading libcni's cache: %w (the plugins' GC not run)", errs.CleanupFailed, err)
	}
	protected := c.Registry.Admission.Protected()
	ifNames := c.Ifs.All(len(c.Nets.All(false)))
	valid := []types.GCAttachment{}
	for _, ids := range []map[string]bool{g.live, protected} {
		for id := range ids {
			for _, ifName := range ifNames {
				valid = append(valid, types.GCAttachment{ContainerID: id, IfName: ifName})
			}
		}
	}
	for id, ifs := range g.LiveIfs {
		for ifName := range ifs {
			valid = append(valid, types.GCAttachment{ContainerID: id, IfName: ifName})
		}
	}
	for _, a := range cached {
		valid = append(valid, types.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	var failed []error
	for _, conf := range lists {
		if err := c.Lib.GCNetworkList(ctx, conf.List, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			failed = append(failed, fmt.Errorf("%w: CNI GC of network %q: %w", errs.CleanupFailed, conf.Info.Name, err))
		}
	}
	return errors.Join(failed...)
}
