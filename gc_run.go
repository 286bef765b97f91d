package cninet

import (
	"slices"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/telemetry"
	"github.com/seed1280861d/cninet/internal/workload"
)

// collector is GC: the parts its runs (gcRun) use.
type collector struct {
	attachments.Owners
	registry *attachments.Registry
	nets     *catalog.Networks
	find     *attachments.Finder
	seams    *attachments.Seams
	lib      *libcni.CNIConfig // libcni's cache and the plugins' GC command
	ifs      attachments.IfNaming
	tel      *telemetry.Recorder
	logger   hclog.Logger
	detacher *attachments.Detacher
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
func (g *gcRun) siblingLive(id, network string, recs []attachments.Found) bool {
	for ifName := range g.liveIfs[id] {
		if g.c.find.CachedAt(id, network, ifName) != nil || g.c.registry.Recorded(id, network, ifName) != nil {
			return true
		}
	}
	for _, fa := range recs {
		if fa.Att.Name() == network && g.liveIfs[id][fa.Att.IfName] {
			return true
		}
	}
	return false
}

// housekeeping removes what killed processes left in the registry: the
// temporary files of writes cut short, and the lock files of ids that
// have no record (each under its lock).
func (g *gcRun) housekeeping() {
	store := g.c.registry.Store
	if n := store.RemoveStaleTemps(); n > 0 {
		g.c.logger.Info("GC removed temporary files of registry writes cut short", "files", n, "state_dir", store.Dir())
	}
	if n := store.RemoveUnusedLocks(); n > 0 {
		g.c.logger.Debug("GC removed lock files of ids without a record", "files", n, "state_dir", store.Dir())
	}
}
