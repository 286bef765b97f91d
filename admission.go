package cninet

import (
	"slices"
	"sort"
	"sync"
)

// Admission: who may work on which allocation when. It uses nothing above
// it; attach, health and gc use it.
//
// The locking rule: every call that reads or changes an allocation's
// attachments holds that allocation's lock for its whole run (enter);
// calls for different allocations run in parallel. GC takes the gate
// alone only while libcni's GC runs (its DELs must not race a Setup's
// ADD), and then the locks of the dead allocations it sweeps, in sorted
// order: locks are only ever taken gate first, then allocation locks in
// sorted order, so nothing can deadlock. An allocation entered while a
// GC runs is protected from that GC.
type admission struct {
	gate  sync.RWMutex // shared by every call; GC takes it alone while libcni's GC runs
	locks keyedMutex
	gc    gcGuard
}

// enter serialises calls for one allocation and lets a running GC know
// the allocation is busy.
func (a *admission) enter(id string) (leave func()) {
	a.gate.RLock()
	unlock := a.locks.lock(id)
	a.gc.note(id)
	return func() {
		unlock()
		a.gate.RUnlock()
	}
}

// beginGC starts a GC: locks held or waited for now are protected.
func (a *admission) beginGC() { a.gc.begin(&a.locks) }

// lockAll takes the locks of ids in sorted order (GC is the only caller
// that holds several).
func (a *admission) lockAll(ids []string) (unlock func()) {
	ids = append([]string(nil), ids...)
	sort.Strings(ids)
	ids = slices.Compact(ids) // a lock taken twice would wait for itself
	unlocks := make([]func(), 0, len(ids))
	for _, id := range ids {
		unlocks = append(unlocks, a.locks.lock(id))
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

func (g *gcGuard) running() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.active > 0
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

// keyedMutex serialises work per key without a global lock.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
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
