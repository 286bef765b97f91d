package repairwatch

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
)

func TestTheWatcherRepairsWhatItMayAndNeverFights(t *testing.T) {
	cases := []struct {
		name string
		// drift makes the host lack something of key: before the first
		// pass, or before each (again).
		inPlace, again bool
		restoreNothing bool
		wantRepairs    int
		wantLine       string // logged once in ten passes
		wantRefused    []string
	}{
		{name: "a drift is repaired once", inPlace: true, wantRepairs: 1, wantLine: "attachment repaired"},
		{name: "a drift that keeps coming back is repaired maxRepairs times within the window, then reported once",
			inPlace: true, again: true, wantRepairs: maxRepairs, wantLine: "drift keeps coming back", wantRefused: []string{"w refused"}},
		{name: "a repair that leaves pieces missing twice in a row is backed off",
			inPlace: true, restoreNothing: true, wantRepairs: 2, wantLine: "left the attachment incomplete"},
		{name: "what cannot be repaired in place is reported once and not tried",
			wantRepairs: 0, wantLine: "cannot be repaired in place", wantRefused: []string{"w not-in-place"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeParts()
			if tc.restoreNothing {
				f.restore = func(identity.Key, footprint.Health) []footprint.Missing { return nil }
			}
			key := f.attach("web-1")
			cfg, log := testConfig(t, time.Hour)
			w := New(cfg, f)
			for i := range 10 {
				if i == 0 || tc.again {
					f.drift(key, tc.inPlace)
				}
				w.pass(context.Background(), time.Time{})
			}
			if got := f.repairsOf(key); got != tc.wantRepairs {
				t.Errorf("%d repairs in ten passes, want %d", got, tc.wantRepairs)
			}
			if got := strings.Count(log.String(), tc.wantLine); got != 1 {
				t.Errorf("%q logged %d times, want once", tc.wantLine, got)
			}
			if !slices.Equal(f.refused, tc.wantRefused) {
				t.Errorf("refusals counted %q, want %q", f.refused, tc.wantRefused)
			}
		})
	}
}

// What the watcher notes of an attachment (its repairs, failures,
// reports, back-off) goes with its record: a host that runs many
// workloads in turn does not grow the watcher's maps for ever.
func TestTheWatcherForgetsAnAttachmentOnceItsRecordIsGone(t *testing.T) {
	f := newFakeParts()
	f.restore = func(identity.Key, footprint.Health) []footprint.Missing { return nil } // failed, backed off
	failing, lost, kept := f.attach("web-1"), f.attach("web-2"), f.attach("web-3")
	f.drift(failing, true)
	f.drift(lost, false)
	f.drift(kept, true)
	cfg, _ := testConfig(t, time.Hour)
	w := New(cfg, f)
	noted := func(key identity.Key) []string {
		w.mu.Lock()
		defer w.mu.Unlock()
		var in []string
		for name, keys := range map[string][]identity.Key{"repairs": slices.Collect(maps.Keys(w.repairs)), "failed": slices.Collect(maps.Keys(w.failed)),
			"reported": slices.Collect(maps.Keys(w.reported)), "lost": slices.Collect(maps.Keys(w.lost)), "backoff": slices.Collect(maps.Keys(w.backoff))} {
			if slices.Contains(keys, key) {
				in = append(in, name)
			}
		}
		slices.Sort(in)
		return in
	}
	for range 2 {
		w.pass(context.Background(), time.Time{})
	}
	if got, want := noted(failing), []string{"backoff", "failed", "repairs"}; !slices.Equal(got, want) {
		t.Fatalf("the watcher notes the failing repair in %q, want %q", got, want)
	}
	if got, want := noted(lost), []string{"repairs", "reported"}; !slices.Equal(got, want) {
		t.Fatalf("the watcher notes the one not repairable in place in %q, want %q", got, want)
	}
	f.forget(failing)
	f.forget(lost)
	w.pass(context.Background(), time.Time{})
	for _, key := range []identity.Key{failing, lost} {
		if in := noted(key); len(in) > 0 {
			t.Errorf("the watcher still notes %s, whose record is gone, in %q", key, in)
		}
	}
	if len(noted(kept)) == 0 {
		t.Error("the watcher forgot web-3, still recorded")
	}
}

// A pass leaves an attachment whose id another operation holds (a
// Check, a Teardown, another process) to a pass soon, without checking
// it again with those drifting: what is missing may be that operation's
// work under way.
func TestAPassLeavesAnAttachmentWhoseIDIsHeldToAPassSoon(t *testing.T) {
	f := newFakeParts()
	key := f.attach("web-1")
	f.drift(key, true)
	f.hold("web-1", true)
	cfg, _ := testConfig(t, time.Hour)
	w := New(cfg, f)
	w.pass(context.Background(), time.Time{})
	if got := f.repairsOf(key); got != 0 {
		t.Fatalf("a pass repaired a held attachment %d times", got)
	}
	if got := f.readsRun(); got != 1 {
		t.Fatalf("a pass read the host %d times for a held attachment, want once (its own check)", got)
	}
	if !w.busy.Load() {
		t.Fatal("a pass that met a held id asks for no pass soon")
	}
}

// A drift refused for coming back too often is repaired by itself once
// its window has passed, not left until the next interval (an hour
// here) nor the next change.
func TestARefusedDriftIsRepairedOnceItsWindowHasPassed(t *testing.T) {
	setPacing(t, &fightWindow, 300*time.Millisecond)
	setPacing(t, &minPassGap, time.Millisecond)
	setPacing(t, &settleQuiet, time.Millisecond)
	f := newFakeParts()
	key := f.attach("web-1")
	cfg, log := testConfig(t, time.Hour)
	w := startTestWatcher(t, cfg, f)
	waitFor(t, "the pass at start, watching the ruleset", func() bool { return w.Passes() >= 1 && f.nft.watching() })
	for f.repairsOf(key) < maxRepairs {
		n, passes := f.repairsOf(key), w.Passes()
		f.drift(key, true)
		f.nft.signal()
		// and the pass's end: a drift back before its check of the
		// repaired would be a repair left incomplete
		waitFor(t, "a repair after the change", func() bool { return f.repairsOf(key) > n && w.Passes() > passes })
	}
	f.drift(key, true)
	f.nft.signal()
	waitFor(t, "the refusal", func() bool { return strings.Contains(log.String(), "drift keeps coming back") })
	if n := f.repairsOf(key); n != maxRepairs {
		t.Fatalf("%d repairs within the window, want %d", n, maxRepairs)
	}
	waitFor(t, "a repair once the window has passed", func() bool { return f.repairsOf(key) == maxRepairs+1 })
}
