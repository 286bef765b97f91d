//go:build unix

package registry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The child process of TestLockAcrossProcesses: the test binary run again
// with childEnv=lock holds LockID of $REGISTRY_TEST_ID in $REGISTRY_TEST_DIR,
// says "locked" and waits to be killed.
const childEnv = "REGISTRY_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "lock" {
		os.Exit(lockChild())
	}
	os.Exit(m.Run())
}

func lockChild() int {
	g, err := Open(os.Getenv("REGISTRY_TEST_DIR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := g.LockID(ctx, os.Getenv("REGISTRY_TEST_ID")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("locked")
	time.Sleep(time.Minute) // killed long before; an orphan ends anyway
	return 3
}

func lockOrFail(t *testing.T, g *Registry, id string) func() {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	unlock, err := g.LockID(ctx, id)
	if err != nil {
		t.Fatalf("LockID(%s): %v", id, err)
	}
	return unlock
}

func TestLockID(t *testing.T) {
	t.Run("a second LockID of the same id waits until its ctx is done", func(t *testing.T) {
		g := open(t)
		unlock := lockOrFail(t, g, "c1")
		defer unlock()
		start := time.Now() // before the deadline is set: it falls 100ms after start at the earliest
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		u2, err := g.LockID(ctx, "c1")
		if err == nil {
			u2()
			t.Fatal("a second LockID of a held id succeeded")
		}
		if !errors.Is(err, ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v, want ErrBusy and context.DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited < 100*time.Millisecond {
			t.Fatalf("gave up after %v, before its ctx was done", waited)
		}
	})

	t.Run("a LockID whose ctx is cancelled says so", func(t *testing.T) {
		g := open(t)
		unlock := lockOrFail(t, g, "c1")
		defer unlock()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(30*time.Millisecond, cancel)
		_, err := g.LockID(ctx, "c1")
		if !errors.Is(err, ErrBusy) || !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want ErrBusy and context.Canceled", err)
		}
	})

	t.Run("different ids do not block each other", func(t *testing.T) {
		g := open(t)
		unlock := lockOrFail(t, g, "c1")
		defer unlock()
		u2, err := g.TryLockID("c2")
		if err != nil {
			t.Fatalf("TryLockID(c2) while c1 is held: %v", err)
		}
		u2()
		u2 = lockOrFail(t, g, "c2")
		u2()
	})

	t.Run("TryLockID returns ErrBusy at once while the id is held", func(t *testing.T) {
		g := open(t)
		unlock := lockOrFail(t, g, "c1")
		start := time.Now()
		u2, err := g.TryLockID("c1")
		if !errors.Is(err, ErrBusy) || u2 != nil {
			t.Fatalf("TryLockID of a held id: %v, want ErrBusy", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("TryLockID took %v", took)
		}
		unlock()
		u2, err = g.TryLockID("c1")
		if err != nil {
			t.Fatalf("TryLockID after unlock: %v", err)
		}
		u2()
	})

	t.Run("unlock lets a waiter in", func(t *testing.T) {
		g := open(t)
		unlock := lockOrFail(t, g, "c1")
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			u, err := g.LockID(ctx, "c1")
			if err == nil {
				u()
			}
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("the waiter got in while the lock was held: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		unlock()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("the waiter: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter did not get in after unlock")
		}
	})

	t.Run("the lock file is there while held and gone after unlock", func(t *testing.T) {
		g := open(t)
		path := filepath.Join(g.Dir(), "locks", "id", "c1")
		for _, lock := range []struct {
			name string
			take func() (func(), error)
		}{
			{"LockID", func() (func(), error) { return g.LockID(context.Background(), "c1") }},
			{"TryLockID", func() (func(), error) { return g.TryLockID("c1") }},
		} {
			unlock, err := lock.take()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("%s held: %v", lock.name, err)
			}
			unlock()
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s released: the lock file: %v, want it gone", lock.name, err)
			}
		}
	})

	t.Run("invalid ids are refused", func(t *testing.T) {
		g := open(t)
		for _, id := range []string{"", "../x", "-a", "a/b", ".."} {
			if _, err := g.LockID(context.Background(), id); !errors.Is(err, ErrInvalid) {
				t.Errorf("LockID(%q): %v, want ErrInvalid", id, err)
			}
			if _, err := g.TryLockID(id); !errors.Is(err, ErrInvalid) {
				t.Errorf("TryLockID(%q): %v, want ErrInvalid", id, err)
			}
		}
		entries, _ := os.ReadDir(filepath.Join(g.Dir(), "locks", "id"))
		if len(entries) != 0 {
			t.Errorf("lock files written: %v", entries)
		}
	})
}

func TestLockGC(t *testing.T) {
	cases := []struct {
		name               string
		firstAlone, second bool
		secondMustWait     bool
	}{
		{"shared and shared coexist", false, false, false},
		{"alone excludes shared", true, false, true},
		{"shared excludes alone", false, true, true},
		{"alone excludes alone", true, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := open(t)
			first, err := g.LockGC(context.Background(), c.firstAlone)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			second, err := g.LockGC(ctx, c.second)
			if c.secondMustWait {
				if !errors.Is(err, ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("second LockGC: %v, want ErrBusy after the deadline", err)
				}
				first()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if second, err = g.LockGC(ctx, c.second); err != nil {
					t.Fatalf("second LockGC after the first's unlock: %v", err)
				}
				second()
				return
			}
			if err != nil {
				t.Fatalf("second LockGC: %v", err)
			}
			second()
			first()
		})
	}

	t.Run("the GC lock and id locks are apart", func(t *testing.T) {
		g := open(t)
		gc, err := g.LockGC(context.Background(), true)
		if err != nil {
			t.Fatal(err)
		}
		defer gc()
		u, err := g.TryLockID("gc")
		if err != nil {
			t.Fatalf("TryLockID while the GC lock is held alone: %v", err)
		}
		u()
	})
}

// TestAWaitingGCGoesBeforeLaterADDs: ADDs whose shared holds overlap
// without a gap (a busy host) never starve a GC: once it waits, new ADDs
// wait behind it, and it gets the lock when those already in have left.
func TestAWaitingGCGoesBeforeLaterADDs(t *testing.T) {
	g := open(t)
	var holders atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 7 * time.Millisecond) // staggered: some ADD always holds
			for {
				select {
				case <-stop:
					return
				default:
				}
				unlock, err := g.LockGC(context.Background(), false)
				if err != nil {
					t.Errorf("an ADD's LockGC: %v", err)
					return
				}
				holders.Add(1)
				time.Sleep(20 * time.Millisecond)
				holders.Add(-1)
				unlock()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	unlock, err := g.LockGC(ctx, true)
	if err != nil {
		t.Fatalf("a GC among overlapping ADDs: %v, want the lock once the ADDs in have left", err)
	}
	if n := holders.Load(); n != 0 {
		t.Errorf("the GC holds its lock alone while %d ADDs hold theirs", n)
	}
	unlock()
}

// TestLockAcrossProcesses: a lock another process holds is busy here, and
// when that process is killed the kernel drops it.
func TestLockAcrossProcesses(t *testing.T) {
	g := open(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=lock", "REGISTRY_TEST_DIR="+g.Dir(), "REGISTRY_TEST_ID=c1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Scan()
		line <- s.Text()
	}()
	select {
	case l := <-line:
		if l != "locked" {
			t.Fatalf("the child said %q, want \"locked\"", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the child did not lock in 10s")
	}

	if u, err := g.TryLockID("c1"); !errors.Is(err, ErrBusy) {
		if u != nil {
			u()
		}
		t.Fatalf("TryLockID while the child holds the lock: %v, want ErrBusy", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := g.LockID(ctx, "c1"); !errors.Is(err, ErrBusy) {
		t.Fatalf("LockID while the child holds the lock: %v, want ErrBusy", err)
	}
	if u, err := g.TryLockID("c2"); err != nil {
		t.Fatalf("TryLockID of another id while the child holds c1: %v", err)
	} else {
		u()
	}

	path := filepath.Join(g.Dir(), "locks", "id", "c1")
	if n := g.RemoveUnusedLocks(); n != 0 {
		t.Fatalf("RemoveUnusedLocks while the child holds c1's lock removed %d", n)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the held lock's file after RemoveUnusedLocks: %v, want it kept", err)
	}

	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no unlock runs
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the killed child's lock file: %v, want it left behind", err)
	}
	unlock := lockOrFail(t, g, "c1")
	unlock()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the lock file after unlock: %v, want it gone", err)
	}
}

// TestRemoveUnusedLocks: the lock files a killed process left are
// removed, under their locks, for ids without a record; a held lock's
// file and the lock file of an id with records are kept.
func TestRemoveUnusedLocks(t *testing.T) {
	g := open(t)
	dir := filepath.Join(g.Dir(), "locks", "id")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"left-1", "left-2", "recorded", "held"} {
		if err := os.WriteFile(filepath.Join(dir, id), nil, 0o600); err != nil { // as a killed holder leaves it
			t.Fatal(err)
		}
	}
	mustPut(t, g, full("recorded", "net1", "eth0"))
	unlock := lockOrFail(t, g, "held")
	defer unlock()
	if n := g.RemoveUnusedLocks(); n != 2 {
		t.Errorf("RemoveUnusedLocks removed %d, want the 2 left by killed holders", n)
	}
	for id, want := range map[string]bool{"left-1": false, "left-2": false, "recorded": true, "held": true} {
		if _, err := os.Stat(filepath.Join(dir, id)); (err == nil) != want {
			t.Errorf("lock file of %s: %v, want kept: %v", id, err, want)
		}
	}
	if u, err := g.TryLockID("held"); !errors.Is(err, ErrBusy) {
		if u != nil {
			u()
		}
		t.Fatalf("the held lock after RemoveUnusedLocks: %v, want still held", err)
	}
}

// TestLockIDExcludesConcurrentHolders: goroutines lock one id in a loop
// and count inside; never two are inside at once (run with -race: the
// counter is not atomic).
func TestLockIDExcludesConcurrentHolders(t *testing.T) {
	g := open(t)
	const workers, rounds = 8, 100
	var inside atomic.Int32
	counter := 0
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				unlock, err := g.LockID(ctx, "c1")
				cancel()
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, i, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					select {
					case errs <- fmt.Errorf("worker %d round %d: %d holders at once", w, i, n):
					default:
					}
				}
				c := counter
				runtime.Gosched()
				counter = c + 1
				inside.Add(-1)
				unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if counter != workers*rounds {
		t.Fatalf("counter %d, want %d: increments were lost", counter, workers*rounds)
	}
	if entries, _ := os.ReadDir(filepath.Join(g.Dir(), "locks", "id")); len(entries) != 0 {
		t.Fatalf("lock files left: %v", entries)
	}
}

// TestLockOfARemovedFileIsTakenAgain: a waiter that opened the lock file
// just before its holder released the lock (and removed the file) locks a
// file nobody else will find; it must see that and lock the file now at
// the path, else a third process would take the id at the same time.
func TestLockOfARemovedFileIsTakenAgain(t *testing.T) {
	g := open(t)
	holder := lockOrFail(t, g, "c1")
	opened := 0
	lockOpened = func(string) {
		opened++
		if opened == 1 {
			holder() // the holder releases between the waiter's open and flock
		}
	}
	defer func() { lockOpened = nil }()
	waiter, err := g.TryLockID("c1")
	lockOpened = nil
	if err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	defer waiter()
	if opened < 2 {
		t.Fatalf("the waiter opened the lock file %d times: it kept the lock of the removed file", opened)
	}
	if third, err := g.TryLockID("c1"); !errors.Is(err, ErrBusy) {
		if third != nil {
			third()
		}
		t.Fatalf("a third TryLockID while the waiter holds the lock: %v, want ErrBusy", err)
	}
}
