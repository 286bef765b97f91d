package cninet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// GCKind says what kind of host state a GCItem was.
type GCKind string

// The kinds of state cleanup and GC remove.
const (
	// GCCachedAttachment: an attachment libcni still had cached, detached
	// with CNI DEL by GC.
	GCCachedAttachment GCKind = "cached attachment"
	// GCRule: an iptables or ip6tables rule.
	GCRule = GCKind(footprint.KindRule)
	// GCChain: an iptables or ip6tables chain.
	GCChain = GCKind(footprint.KindChain)
	// GCReservation: a host-local IP reservation file.
	GCReservation = GCKind(footprint.KindReservation)
	// GCCachedResult: a libcni cached result file.
	GCCachedResult = GCKind(footprint.KindCachedResult)
)

// GCItem is one piece of host state that was removed.
type GCItem struct {
	Kind   GCKind `json:"kind"`
	ID     string `json:"id"`     // the allocation ID that owned it
	Detail string `json:"detail"` // the rule, chain or file
}

// GCReport lists what GC removed.
type GCReport struct {
	Removed []GCItem `json:"removed"`
}

// Count returns how many removed items are of kind.
func (r *GCReport) Count(kind GCKind) int {
	n := 0
	for _, it := range r.Removed {
		if it.Kind == kind {
			n++
		}
	}
	return n
}

// IDs returns the allocation IDs something was removed for, sorted.
func (r *GCReport) IDs() []string {
	seen := map[string]bool{}
	for _, it := range r.Removed {
		seen[it.ID] = true
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (r *GCReport) add(items []footprint.Item) {
	for _, it := range items {
		r.Removed = append(r.Removed, GCItem{Kind: GCKind(it.Kind), ID: it.ID, Detail: it.Detail})
	}
}

// GC brings the host back to what the live allocations need: in every
// network the Configurator knows, every attachment whose allocation ID is
// not in liveAllocIDs is removed (an attachment is live when its
// allocation is, whatever its interface). First libcni's GC detaches
// cached stale attachments with CNI DEL (and sends the CNI 1.1 GC verb
// where the conflist's version allows); then a sweep removes what no cache
// remembers any more — the usual case after a crash or reboot — by the
// ownership rule: rules and chains whose comment or derived name proves a
// dead owner, firewall rules of addresses only a dead owner held,
// reservations and cached results of dead owners.
//
// liveAllocIDs must not be nil (an empty slice means nothing is live).
// Allocations this Configurator is setting up, checking or tearing down
// when GC starts, or starts to while it runs, are never collected. A
// network whose conflist sets disableGC is skipped. One network's failure
// does not stop the others; the error joins each.
func (c *Configurator) GC(ctx context.Context, liveAllocIDs []string) (*GCReport, error) {
	if liveAllocIDs == nil {
		return nil, fmt.Errorf("%w: nil live set (pass an empty slice when nothing is live)", ErrInvalidArgument)
	}
	if _, err := c.current(); err != nil {
		return nil, err
	}
	known := c.knownNetworks()
	var nets []loadedConf
	for _, conf := range known {
		if conf.info.disableGC {
			c.logger.Debug("GC skipped: the conflist sets disableGC", "network", conf.info.name)
			continue
		}
		nets = append(nets, conf)
	}
	report := &GCReport{}
	if len(nets) == 0 {
		return report, nil
	}
	live := map[string]bool{}
	for _, id := range liveAllocIDs {
		live[id] = true
	}
	ifNames := c.ifNames(len(known)) // a workload in n networks has <prefix>0 … <prefix>(n-1)
	c.gc.begin(&c.locks)
	defer c.gc.end()
	cls := make([]*footprint.Cleaner, len(nets))
	for i, conf := range nets {
		cls[i] = footprint.NewCleaner(ctx, c.footprintNetwork(conf, ifNames[0], ifNames), c.host())
		cls[i].GuardHostports(nil) // libcni's GC DELs by container id, which portmap's nftables DEL reads as "of any network"
	}
	errs := []error{c.gcCached(ctx, nets, ifNames, live, report)}
	var delIDs []string
	for _, it := range report.Removed {
		delIDs = append(delIDs, it.ID) // so far only what libcni's GC DEL'd
	}
	for i, conf := range nets {
		cls[i].KeepGuarded(delIDs)
		errs = append(errs, c.sweep(cls[i], conf, live, report))
		c.logRestored(cls[i].Restored(), "GC of network "+conf.info.name)
	}
	if n := len(report.Removed); n > 0 {
		c.logger.Info("GC removed stale attachments", "networks", len(nets), "items", n, "alloc_ids", report.IDs())
	}
	return report, errors.Join(errs...)
}

// gcCached runs libcni's GC of each network with the live (and protected)
// attachments as the valid ones, under every interface name they may have:
// a live workload's eth1 must not look stale. No Setup may run meanwhile:
// the GC verb would take its half-made attachment for a stale one.
func (c *Configurator) gcCached(ctx context.Context, nets []loadedConf, ifNames []string, live map[string]bool, report *GCReport) error {
	c.gate.Lock()
	defer c.gate.Unlock()
	lib := c.lib
	before, _ := lib.GetCachedAttachments("")
	valid := []types.GCAttachment{}
	protected := c.gc.protectedIDs()
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
	var errs []error
	for _, conf := range nets {
		names[conf.info.name] = true
		if err := lib.GCNetworkList(ctx, conf.list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
			errs = append(errs, fmt.Errorf("%w: CNI GC of network %q: %w", ErrCleanupFailed, conf.info.name, err))
		}
	}
	after, _ := lib.GetCachedAttachments("")
	still := map[string]bool{}
	for _, a := range after {
		still[a.Network+"/"+a.ContainerID+"/"+a.IfName] = true
	}
	for _, a := range before {
		if names[a.Network] && !still[a.Network+"/"+a.ContainerID+"/"+a.IfName] && !live[a.ContainerID] {
			report.Removed = append(report.Removed, GCItem{Kind: GCCachedAttachment, ID: a.ContainerID, Detail: a.IfName})
		}
	}
	return errors.Join(errs...)
}

// sweep removes the footprint of every dead attachment of cl's network it
// can attribute, under any of the interface names the network's
// attachments may have.
func (c *Configurator) sweep(cl *footprint.Cleaner, conf loadedConf, live map[string]bool, report *GCReport) error {
	var dead []string
	for _, id := range cl.Discover() {
		if !live[id] {
			dead = append(dead, id)
		}
	}
	unlock := c.lockAll(dead)
	defer unlock()
	protected := c.gc.protectedIDs() // started after the scan: not ours to judge
	dead = slices.DeleteFunc(dead, func(id string) bool { return protected[id] })
	removed, err := cl.Clean(dead) // with nothing dead, it still reports what the scan could not read
	report.add(removed)
	if err != nil {
		return fmt.Errorf("%w in network %q: %w", ErrCleanupFailed, conf.info.name, err)
	}
	return nil
}

// lockAll takes the per-allocation locks of ids in order (GC is the only
// caller that holds several, so ordering rules out deadlock).
func (c *Configurator) lockAll(ids []string) (unlock func()) {
	unlocks := make([]func(), 0, len(ids))
	for _, id := range ids {
		unlocks = append(unlocks, c.locks.lock(id))
	}
	return func() {
		for _, u := range unlocks {
			u()
		}
	}
}

// gcGuard remembers which allocations were busy when GC began or became
// busy while it ran.
type gcGuard struct {
	mu        sync.Mutex
	active    int
	protected map[string]bool
}

func (g *gcGuard) begin(locks *keyedMutex) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.active == 0 {
		g.protected = map[string]bool{}
	}
	g.active++
	for _, id := range locks.keys() {
		g.protected[id] = true
	}
}

func (g *gcGuard) end() {
	g.mu.Lock()
	g.active--
	g.mu.Unlock()
}

// note records that id is being worked on, if a GC is running.
func (g *gcGuard) note(id string) {
	g.mu.Lock()
	if g.active > 0 {
		g.protected[id] = true
	}
	g.mu.Unlock()
}

func (g *gcGuard) protectedIDs() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]bool, len(g.protected))
	for id := range g.protected {
		out[id] = true
	}
	return out
}

// keys returns the keys held or waited for.
func (k *keyedMutex) keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := make([]string, 0, len(k.locks))
	for key := range k.locks {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}
