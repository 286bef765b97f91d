package admission

import (
	"context"
	"sync"
)

// Control is the per-allocation locks and the GC guard of one
// Configurator (see the package documentation for the locking rule). The
// zero value is ready to use; it must not be copied after first use.
type Control struct {
	gate  sync.RWMutex // shared by every call; GC takes it alone while libcni's GC runs
	locks Keyed
	gc    gcGuard
}

// Enter serialises calls for one allocation and lets a running GC know
// the allocation is busy.
func (a *Control) Enter(id string) (leave func()) {
	leave, _ = a.EnterWithin(context.Background(), id) // no deadline: a call waits for the one before it
	return leave
}

// EnterWithin is Enter whose wait for the call before it ends with ctx
// (its error, holding nothing): a call may not wait past its deadline
// for another that hangs.
func (a *Control) EnterWithin(ctx context.Context, id string) (leave func(), err error) {
	a.gate.RLock()
	unlock, err := a.locks.Lock(ctx, id)
	if err != nil {
		a.gate.RUnlock()
		return nil, err
	}
	a.gc.note(id)
	return func() {
		unlock()
		a.gate.RUnlock()
	}, nil
}

// TryEnter is Enter for a caller that would rather not wait: false when
// the allocation (or the gate, for a GC) is busy.
func (a *Control) TryEnter(id string) (leave func(), ok bool) {
	if !a.gate.TryRLock() {
		return nil, false
	}
	unlock, ok := a.locks.TryLock(id)
	if !ok {
		a.gate.RUnlock()
		return nil, false
	}
	a.gc.note(id)
	return func() {
		unlock()
		a.gate.RUnlock()
	}, true
}

// LockGate takes the gate alone: no call can Enter until unlock. GC holds
// it while libcni's GC runs.
func (a *Control) LockGate() (unlock func()) {
	a.gate.Lock()
	return a.gate.Unlock
}

// BeginGC starts a GC: locks held or waited for now are protected.
func (a *Control) BeginGC() { a.gc.begin(&a.locks) }

// EndGC ends a GC that BeginGC started.
func (a *Control) EndGC() { a.gc.end() }

// GCRunning reports whether a GC is running.
func (a *Control) GCRunning() bool { return a.gc.running() }

// Protected returns the allocations a running GC must leave alone: busy
// when it began, or entered since.
func (a *Control) Protected() map[string]bool { return a.gc.protectedIDs() }

// LockAll takes the locks of ids in sorted order (GC is the only caller
// that holds several).
func (a *Control) LockAll(ids []string) (unlock func()) {
	unlock, _ = a.locks.LockAll(context.Background(), ids)
	return unlock
}

// gcGuard remembers which allocations were busy when GC began or became
// busy while it ran.
type gcGuard struct {
	mu        sync.Mutex
	active    int
	protected map[string]bool
}

func (g *gcGuard) begin(locks *Keyed) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.active == 0 {
		g.protected = map[string]bool{}
	}
	g.active++
	for _, id := range locks.Keys() {
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
