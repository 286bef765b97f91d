package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The locking rule, which every process on the host honours: every
// operation on a container id holds the id's lock for its whole run
// (LockID); an ADD also holds the GC lock shared, and a GC holds it alone
// (LockGC), so that no ADD runs while a GC judges what is stale (CNI 1.1);
// a waiting GC goes before ADDs that come after it (the turnstile).
// Locks are taken GC lock first, then an id lock; nobody waits for an id
// lock while holding another one (a GC takes the ids it collects with
// TryLockID and leaves the busy ones alone), so no two processes can wait
// for each other. Every wait is bounded by its ctx.
//
// The locks are flock(2) locks on files under locks/: the kernel drops a
// lock when its process dies, however it dies, so a killed process never
// leaves a lock held. An id's lock file is removed when its lock is
// released; a waiter that locked a file just removed sees that its file
// is no longer the one at the path and tries again.

// ErrBusy says a lock is held by another operation.
var ErrBusy = errors.New("busy: another operation holds the lock")

// lockPoll bounds how long a waiter sleeps between tries.
const lockPoll = 20 * time.Millisecond

func (g *Registry) idLockPath(id string) string { return filepath.Join(g.dir, "locks", "id", id) }

// LockID takes container id's lock, waiting for it until ctx is done.
func (g *Registry) LockID(ctx context.Context, id string) (unlock func(), err error) {
	if !containerID.MatchString(id) {
		return nil, fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if _, err := g.mkdir("locks", "id"); err != nil {
		return nil, err
	}
	return lockFile(ctx, g.idLockPath(id), true, true)
}

// TryLockID takes container id's lock if nobody holds it, else returns
// ErrBusy at once.
func (g *Registry) TryLockID(id string) (unlock func(), err error) {
	if !containerID.MatchString(id) {
		return nil, fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	if _, err := g.mkdir("locks", "id"); err != nil {
		return nil, err
	}
	return tryLockFile(g.idLockPath(id), true, true)
}

// RemoveUnusedLocks removes the lock files of ids that have no record,
// each under its own lock: a process killed while it held an id's lock
// leaves the file behind (the kernel drops the lock, not the file). A
// lock someone holds is left alone. It returns how many it removed. GC
// calls it.
func (g *Registry) RemoveUnusedLocks() int {
	dir := filepath.Join(g.dir, "locks", "id")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		id := e.Name()
		if !e.Type().IsRegular() || !containerID.MatchString(id) || g.hasRecordDir(id) {
			continue
		}
		unlock, err := tryLockFile(g.idLockPath(id), true, true)
		if err != nil {
			continue // held: in use
		}
		if !g.hasRecordDir(id) { // a holder may have recorded it before we locked
			n++
		}
		unlock() // removes the file, still under the lock
	}
	return n
}

// hasRecordDir reports whether id has a directory of records (or
// anything else) under attachments/.
func (g *Registry) hasRecordDir(id string) bool {
	_, err := os.Lstat(g.idDir(id))
	return !errors.Is(err, os.ErrNotExist)
}

// LockGC takes the host-wide GC lock, alone (a GC) or shared (an ADD),
// waiting for it until ctx is done.
//
// flock(2) has no queue: on a busy host the ADDs' shared holds overlap
// without a gap, and a GC that only polls for the lock alone would wait
// for ever. So both pass a turnstile first (locks/gc-turn, taken alone and
// held only while the GC lock is being taken): a waiting GC holds the
// turnstile, new ADDs wait behind it, and the GC gets its lock once the
// ADDs already in have left. An ADD holds the turnstile only for as long
// as its shared lock takes, which is at once unless a GC runs.
func (g *Registry) LockGC(ctx context.Context, alone bool) (unlock func(), err error) {
	dir, err := g.mkdir("locks")
	if err != nil {
		return nil, err
	}
	leaveTurnstile, err := lockFile(ctx, filepath.Join(dir, "gc-turn"), true, false)
	if err != nil {
		return nil, err
	}
	defer leaveTurnstile()
	return lockFile(ctx, filepath.Join(dir, "gc"), alone, false)
}

// lockFile waits for the lock at path until ctx is done, first briefly,
// then every lockPoll.
func lockFile(ctx context.Context, path string, exclusive, removeOnUnlock bool) (func(), error) {
	wait := time.Millisecond
	for {
		unlock, err := tryLockFile(path, exclusive, removeOnUnlock)
		if !errors.Is(err, ErrBusy) {
			return unlock, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for the lock %s: %w: %w", path, ErrBusy, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, lockPoll)
	}
}
