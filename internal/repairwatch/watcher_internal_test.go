package repairwatch

import (
	"testing"
	"time"
)

// A pass that met a held id is followed by another soon: not only at
// the next change or interval, which may be an hour away.
func TestTheWatcherRunsAPassSoonAfterOneMetAHeldID(t *testing.T) {
	setPacing(t, &minPassGap, 5*time.Millisecond)
	f := newFakeParts()
	key := f.attach("web-1")
	f.drift(key, true)
	f.hold("web-1", true)
	cfg, _ := testConfig(t, time.Hour) // no interval, no change: the pass soon alone
	w := startTestWatcher(t, cfg, f)
	waitFor(t, "three passes that met the held id", func() bool { return w.Passes() >= 3 })
	f.hold("web-1", false)
	waitFor(t, "web-1 repaired once its id is free", func() bool { return f.repairsOf(key) == 1 })
}

// A burst of changes (one flush is many notifications) is one pass once
// the ruleset pauses; a ruleset that never pauses gets one settleMax
// after the first change.
func TestABurstOfChangesIsOnePass(t *testing.T) {
	cases := []struct {
		name            string
		quiet, max, gap time.Duration
		keepSignalling  bool // until the pass runs
	}{
		{name: "a burst that pauses is one pass", quiet: 300 * time.Millisecond, max: time.Minute},
		{name: "changes that never pause get a pass settleMax after the first", quiet: time.Minute, max: 50 * time.Millisecond, keepSignalling: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setPacing(t, &settleQuiet, tc.quiet)
			setPacing(t, &settleMax, tc.max)
			setPacing(t, &minPassGap, 0)
			f := newFakeParts()
			f.attach("web-1")
			cfg, _ := testConfig(t, time.Hour)
			w := startTestWatcher(t, cfg, f)
			waitFor(t, "the pass at start, watching the ruleset", func() bool { return w.Passes() == 1 && f.nft.watching() })
			for i := 0; i < 10 || tc.keepSignalling && w.Passes() < 2; i++ {
				f.nft.signal()
				time.Sleep(2 * time.Millisecond)
				if i > 5000 {
					t.Fatal("no pass after 10s of changes")
				}
			}
			waitFor(t, "the pass after the burst", func() bool { return w.Passes() >= 2 })
			if tc.keepSignalling {
				return
			}
			time.Sleep(2 * tc.quiet)
			if got := w.Passes(); got != 2 {
				t.Fatalf("%d passes after a burst of ten changes, want two (at start, after the burst)", got)
			}
		})
	}
}

// While nf_tables' notifications cannot be watched, a change arrives
// nowhere: once the watch is back, the watcher checks at once rather
// than at the next interval.
func TestTheWatcherChecksAtOnceWhenItWatchesTheRulesetAgain(t *testing.T) {
	cases := []struct {
		name string
		lose func(f *fakeParts)
	}{
		{name: "the watch could not start", lose: func(f *fakeParts) { f.nft.failing.Store(true) }},
		{name: "the notifications stopped", lose: nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setPacing(t, &resubscribeDelay, 10*time.Millisecond)
			f := newFakeParts()
			key := f.attach("web-1")
			if tc.lose != nil {
				tc.lose(f)
			}
			cfg, _ := testConfig(t, time.Hour)
			w := startTestWatcher(t, cfg, f)
			waitFor(t, "the pass at start", func() bool { return w.Passes() >= 1 })
			f.drift(key, true) // while nobody listens
			if tc.lose == nil {
				f.nft.stop()
			}
			f.nft.failing.Store(false)
			waitFor(t, "web-1 repaired once the watch is back", func() bool { return f.repairsOf(key) == 1 })
		})
	}
}

// The passes changes trigger space out while they find nothing missing
// (a host whose workloads come and go), and come back to minPassGap as
// soon as one finds drift.
func TestThePassGapGrowsWhileChangesBringNoDrift(t *testing.T) {
	cases := []struct {
		name    string
		gap     time.Duration
		drifted bool
		want    time.Duration
	}{
		{name: "a pass that found nothing doubles the gap", gap: minPassGap, want: 2 * minPassGap},
		{name: "the gap grows no further than maxPassGap", gap: maxPassGap, want: maxPassGap},
		{name: "a pass that found drift brings the gap back to minPassGap", gap: maxPassGap, drifted: true, want: minPassGap},
		{name: "a gap below minPassGap starts from minPassGap", gap: 0, want: minPassGap},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextPassGap(tc.gap, tc.drifted); got != tc.want {
				t.Fatalf("nextPassGap(%s, %v) = %s, want %s", tc.gap, tc.drifted, got, tc.want)
			}
		})
	}
}
