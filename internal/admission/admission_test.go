package admission

import (
	"reflect"
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
	if keys := a.locks.keys(); len(keys) != 0 {
		t.Fatalf("locks left after every unlock: %v", keys)
	}
}
