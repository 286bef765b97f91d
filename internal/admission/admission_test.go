package admission

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEnterSerialisesOneAllocationAndNotOthers(t *testing.T) {
	var a Control
	leave := a.Enter("x")
	entered := make(chan string, 2)
	go func() { defer a.Enter("x")(); entered <- "x" }()
	go func() { defer a.Enter("y")(); entered <- "y" }()
	if got := <-entered; got != "y" {
		t.Fatalf("%s entered while x was held, want y first", got)
	}
	select {
	case <-entered:
		t.Fatal("a second call for x entered while the first held it")
	case <-time.After(20 * time.Millisecond):
	}
	leave()
	if got := <-entered; got != "x" {
		t.Fatalf("entered %s, want x once released", got)
	}
}

func TestLockGateKeepsEveryCallOut(t *testing.T) {
	var a Control
	unlock := a.LockGate()
	entered := make(chan struct{})
	go func() { defer a.Enter("x")(); close(entered) }()
	select {
	case <-entered:
		t.Fatal("a call entered while the gate was held alone")
	case <-time.After(20 * time.Millisecond):
	}
	unlock()
	<-entered
}

func TestAGCProtectsWhatIsBusyWhenItBeginsAndWhatIsEnteredWhileItRuns(t *testing.T) {
	var a Control
	leaveBusy := a.Enter("busy")
	leaveBefore := a.Enter("before")
	leaveBefore()
	if a.GCRunning() {
		t.Fatal("GCRunning before BeginGC")
	}
	a.BeginGC()
	if !a.GCRunning() {
		t.Fatal("not GCRunning after BeginGC")
	}
	a.Enter("during")()
	want := map[string]bool{"busy": true, "during": true}
	if got := a.Protected(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Protected() = %v, want %v", got, want)
	}
	a.EndGC()
	leaveBusy()
	if a.GCRunning() {
		t.Fatal("GCRunning after EndGC")
	}
	a.Enter("after")()
	if got := a.Protected(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the GC ended, Protected() = %v, want the ended GC's %v", got, want)
	}
}

func TestLockAllTakesEachLockOnceInAnyOrderWithoutDeadlock(t *testing.T) {
	var a Control
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := []string{"c", "a", "b", "a"}
			if i%2 == 1 {
				ids = []string{"b", "c", "a"}
			}
			a.LockAll(ids)()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("LockAll deadlocked")
	}
	if keys := a.locks.Keys(); len(keys) != 0 {
		t.Fatalf("locks left after every unlock: %v", keys)
	}
}

func TestKeyedWaitsForItsKeyAloneAndWithinItsContext(t *testing.T) {
	var k Keyed
	ctx := context.Background()
	unlockA, err := k.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := k.Lock(ctx, "b") // another key never waits
	if err != nil {
		t.Fatal(err)
	}
	unlockB()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := k.Lock(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second Lock of a held key: %v, want the context's deadline", err)
	}
	if got := strings.Join(k.Keys(), ","); got != "a" {
		t.Fatalf("keys after a wait gave up: %q, want the holder's a alone", got)
	}
	got := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		close(waiting)
		unlock, err := k.Lock(ctx, "a")
		if err == nil {
			unlock()
		}
		got <- err
	}()
	<-waiting
	unlockA()
	if err := <-got; err != nil {
		t.Fatalf("the Lock after the holder unlocked: %v", err)
	}
	if keys := k.Keys(); len(keys) != 0 {
		t.Fatalf("keys after every unlock: %v", keys)
	}
	unlockAll, err := k.LockAll(ctx, []string{"b", "a", "b"})
	if err != nil {
		t.Fatalf("LockAll of a key given twice: %v", err)
	}
	if got := strings.Join(k.Keys(), ","); got != "a,b" {
		t.Fatalf("keys held by LockAll: %q, want a,b", got)
	}
	if _, err := k.LockAll(short, []string{"c", "b"}); err == nil {
		t.Fatal("LockAll of a held key was granted")
	}
	if got := strings.Join(k.Keys(), ","); got != "a,b" {
		t.Fatalf("keys after a LockAll gave up: %q, want a,b (c released)", got)
	}
	unlockAll()
}
