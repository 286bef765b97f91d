package admission

import (
	"context"
	"slices"
	"sort"
	"sync"
)

// Keyed is a mutex per key without a global lock, whose waits a context
// can bound. The zero value is ready to use; it must not be copied after
// first use.
type Keyed struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	held chan struct{} // while held: closed by the holder's unlock
	refs int           // holders and waiters
}

// Lock waits until no one holds key, then holds it; when ctx is done
// first, it returns ctx's error and holds nothing.
func (k *Keyed) Lock(ctx context.Context, key string) (unlock func(), err error) {
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
	for e.held != nil {
		held := e.held
		k.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			k.mu.Lock()
			k.drop(key, e)
			k.mu.Unlock()
			return nil, ctx.Err()
		}
		k.mu.Lock()
	}
	mine := make(chan struct{})
	e.held = mine
	k.mu.Unlock()
	return func() {
		k.mu.Lock()
		e.held = nil
		close(mine)
		k.drop(key, e)
		k.mu.Unlock()
	}, nil
}

// drop ends one holder's or waiter's interest in key; k.mu is held.
func (k *Keyed) drop(key string, e *keyedEntry) {
	if e.refs--; e.refs == 0 {
		delete(k.locks, key)
	}
}

// TryLock holds key if no one does, else returns false at once.
func (k *Keyed) TryLock(key string) (unlock func(), ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	if e.held != nil {
		return nil, false
	}
	e.refs++
	mine := make(chan struct{})
	e.held = mine
	return func() {
		k.mu.Lock()
		e.held = nil
		close(mine)
		k.drop(key, e)
		k.mu.Unlock()
	}, true
}

// LockAll takes the locks of keys, each once, in sorted order, so that
// two callers of LockAll never wait for each other crosswise; when ctx is
// done first, it returns ctx's error and holds nothing.
func (k *Keyed) LockAll(ctx context.Context, keys []string) (unlock func(), err error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys))) // a lock taken twice would wait for itself
	unlocks := make([]func(), 0, len(keys))
	unlock = func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	for _, key := range keys {
		u, err := k.Lock(ctx, key)
		if err != nil {
			unlock()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return unlock, nil
}

// Keys returns the keys held or waited for, sorted.
func (k *Keyed) Keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	keys := make([]string, 0, len(k.locks))
	for key := range k.locks {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}
