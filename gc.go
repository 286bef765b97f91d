package cninet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// GCKind says what kind of host state a GCItem was.
type GCKind string

// The kinds of state cleanup and GC remove.
const (
	// GCCachedAttachment: an attachment libcni still had cached, detached
	// with CNI DEL by GC.
	GCCachedAttachment GCKind = "cached attachment"
	// GCRule: an iptables or ip6tables rule.
	GCRule GCKind = "iptables rule"
	// GCChain: an iptables or ip6tables chain.
	GCChain GCKind = "iptables chain"
	// GCReservation: a host-local IP reservation file.
	GCReservation GCKind = "ip reservation"
	// GCCachedResult: a libcni cached result file.
	GCCachedResult GCKind = "cached result"
)

// GCItem is one piece of host state that was removed.
type GCItem struct {
	Kind   GCKind
	ID     string // the allocation ID that owned it
	Detail string // the rule, chain or file
}

// GCReport lists what GC removed.
type GCReport struct {
	Removed []GCItem
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
	return sortedKeys(seen)
}

// libcniCacheDir is where libcni (and so go-cni) caches results.
const libcniCacheDir = "/var/lib/cni"

// GC brings the host back to what the live allocations need: every
// attachment of this network whose allocation ID is not in liveAllocIDs is
// removed. First libcni's GC detaches cached stale attachments with CNI DEL
// (and sends the CNI 1.1 GC verb where the conflist's version allows); then
// a sweep removes what no cache remembers any more — the usual case after a
// crash or reboot — by the ownership rule: rules and chains whose comment or
// derived name proves a dead owner, firewall rules of addresses only a dead
// owner held, reservations and cached results of dead owners.
//
// liveAllocIDs must not be nil (an empty slice means nothing is live).
// Allocations this Configurator is setting up, checking or tearing down
// when GC starts, or starts to while it runs, are never collected. A
// conflist with disableGC set makes GC a no-op.
func (c *Configurator) GC(ctx context.Context, liveAllocIDs []string) (*GCReport, error) {
	if liveAllocIDs == nil {
		return nil, fmt.Errorf("%w: nil live set (pass an empty slice when nothing is live)", ErrInvalidArgument)
	}
	conf, err := c.current()
	if err != nil {
		return nil, err
	}
	report := &GCReport{}
	if conf.info.disableGC {
		c.logger.Debug("GC skipped: the conflist sets disableGC", "network", conf.info.name)
		return report, nil
	}
	live := map[string]bool{}
	for _, id := range liveAllocIDs {
		live[id] = true
	}
	c.gc.begin(&c.locks)
	defer c.gc.end()
	cniErr := c.gcCached(ctx, conf, live, report)
	sweepErr := c.sweep(conf, live, report)
	if n := len(report.Removed); n > 0 {
		c.logger.Info("GC removed stale attachments", "network", conf.info.name, "items", n, "alloc_ids", report.IDs())
	}
	return report, errors.Join(cniErr, sweepErr)
}

// gcCached runs libcni's GC with the live (and protected) attachments as
// the valid ones. No Setup may run meanwhile: the GC verb would take its
// half-made attachment for a stale one.
func (c *Configurator) gcCached(ctx context.Context, conf loadedConf, live map[string]bool, report *GCReport) error {
	c.gate.Lock()
	defer c.gate.Unlock()
	lib := c.libcni()
	valid := []types.GCAttachment{}
	for id := range live {
		valid = append(valid, types.GCAttachment{ContainerID: id, IfName: c.ifName})
	}
	for id := range c.gc.protectedIDs() {
		valid = append(valid, types.GCAttachment{ContainerID: id, IfName: c.ifName})
	}
	before, _ := lib.GetCachedAttachments("")
	err := lib.GCNetworkList(ctx, conf.list, &libcni.GCArgs{ValidAttachments: valid})
	after, _ := lib.GetCachedAttachments("")
	still := map[string]bool{}
	for _, a := range after {
		still[a.ContainerID+"/"+a.IfName] = true
	}
	for _, a := range before {
		if a.Network == conf.info.name && !still[a.ContainerID+"/"+a.IfName] && !live[a.ContainerID] {
			report.Removed = append(report.Removed, GCItem{Kind: GCCachedAttachment, ID: a.ContainerID, Detail: a.IfName})
		}
	}
	if err != nil {
		return fmt.Errorf("%w: CNI GC of network %q: %w", ErrCleanupFailed, conf.info.name, err)
	}
	return nil
}

// sweep removes the footprint of every dead attachment it can attribute.
func (c *Configurator) sweep(conf loadedConf, live map[string]bool, report *GCReport) error {
	cl := c.newCleaner(conf)
	cl.files = cl.scanFiles(nil)
	found := map[string]bool{}
	for _, id := range cl.files.ids() {
		found[id] = true
	}
	var mu sync.Mutex
	cl.forEachFamily(func(t *familyTables) {
		ids := t.discover()
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			found[id] = true
		}
	})
	dead := map[string]bool{}
	for id := range found {
		if !live[id] {
			dead[id] = true
		}
	}
	unlock := c.lockAll(sortedKeys(dead))
	defer unlock()
	for id := range c.gc.protectedIDs() {
		delete(dead, id) // started after the scan: it is not ours to judge
	}
	if len(dead) > 0 {
		cl.forEachFamily(func(t *familyTables) { t.clean(dead) })
		cl.removeFiles(dead)
	}
	report.Removed = append(report.Removed, cl.removed...)
	return cl.err()
}

// discover returns the ids the nat rules of this network name: in the
// jumps, and, where the whole table is listed, inside masquerade chains
// whose jump is already gone.
func (t *familyTables) discover() (ids []string) {
	for _, chain := range []string{"POSTROUTING", hostportDNATChain} {
		rules, _ := t.list("nat", chain)
		for i := range rules {
			if id, ok := t.c.masqOwner(&rules[i]); ok {
				ids = append(ids, id)
			} else if id, ok := t.c.dnatOwner(rules[i]); ok {
				ids = append(ids, id)
			}
		}
	}
	for chain, rules := range t.listing("nat", "POSTROUTING").chains {
		if !strings.HasPrefix(chain, "CNI-") || len(rules) == 0 {
			continue
		}
		if id, ok := t.c.commentOwner(rules[0].comment); ok && t.c.owner(id).masqChain() == chain {
			ids = append(ids, id)
		}
	}
	return ids
}

// dnatOwner returns the id of an uncut portmap comment of this network.
func (c *cleaner) dnatOwner(r rule) (string, bool) {
	prefix := fmt.Sprintf(`dnat name: "%s" id: "`, c.info.name)
	if r.chain != hostportDNATChain || len(r.comment) < len(prefix)+1 || r.comment[:len(prefix)] != prefix || r.comment[len(r.comment)-1] != '"' {
		return "", false
	}
	id := r.comment[len(prefix) : len(r.comment)-1]
	return id, containerIDRule.MatchString(id) && c.owner(id).dnatComment() == r.comment
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
