package gc

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

// Collector is GC: the parts its runs (run) use.
type Collector struct {
	attachments.Owners
	Registry *attachments.Registry
	Nets     *catalog.Networks
	Find     *attachments.Finder
	Seams    *attachments.Seams
	Lib      *libcni.CNIConfig // libcni's cache and the plugins' GC command
	Ifs      attachments.IfNaming
	Tel      *telemetry.Recorder
	Logger   hclog.Logger
	Detacher *attachments.Detacher
}

// run is one GC: what is live, which networks it collects, and what it
// removed.
type run struct {
	c     *Collector
	owner string          // whose dead attachments it collects
	live  map[string]bool // ids not to collect: the caller's live ones, then every id another owner's record names
	Scope                 // what GCOptions ask: the networks, the live interfaces, a dry run
	// nets are the networks collected; skipped, by name, those left
	// alone: spared by only, or their conflist sets disableGC.
	nets     []catalog.Conf
	skipped  map[string]bool
	report   *Report
	progress *progress // from when the GC begins
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
func (g *run) covers(network string) bool {
	return slices.ContainsFunc(g.nets, func(conf catalog.Conf) bool { return conf.Info.Name == network })
}

// liveAt reports whether the attachment of id as ifName is live: its id
// is, or GCOptions.LiveAttachments names it.
func (g *run) liveAt(id, ifName string) bool {
	return g.live[id] || g.LiveIfs[id][ifName]
}

// partlyLive reports whether GCOptions.LiveAttachments names some of
// id's interfaces: the id keeps those.
func (g *run) partlyLive(id string) bool { return len(g.LiveIfs[id]) > 0 }

// siblingLive reports whether network holds, besides the attachment,
// one of id's live interfaces, by the registry or libcni's cache: its
// force cleanup, which acts on id in network, would reach that one.
func (g *run) siblingLive(id, network string, recs []attachments.Found) bool {
	for ifName := range g.LiveIfs[id] {
		if g.c.Find.CachedAt(id, network, ifName) != nil || g.c.Registry.Recorded(id, network, ifName) != nil {
			return true
		}
	}
	for _, fa := range recs {
		if fa.Att.Name() == network && g.LiveIfs[id][fa.Att.IfName] {
			return true
		}
	}
	return false
}

// housekeeping removes what killed processes left in the registry: the
// temporary files of writes cut short, and the lock files of ids that
// have no record (each under its lock).
func (g *run) housekeeping() {
	store := g.c.Registry.Store
	if n := store.RemoveStaleTemps(); n > 0 {
		g.c.Logger.Info("GC removed temporary files of registry writes cut short", "files", n, "state_dir", store.Dir())
	}
	if n := store.RemoveUnusedLocks(); n > 0 {
		g.c.Logger.Debug("GC removed lock files of ids without a record", "files", n, "state_dir", store.Dir())
	}
}
