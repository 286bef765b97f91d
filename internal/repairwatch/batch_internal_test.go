package repairwatch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/identity"
)

// A pass writes the iptables rules of every drifting attachment it can in
// one batch, each under its lock and only while its record is the
// attached one the pass read; what the batch cannot write is the
// plugins' ADD's, one attachment at a time.
func TestAPassWritesTheDriftingAttachmentsRulesInOneBatchUnderTheirLocks(t *testing.T) {
	cases := []struct {
		name        string
		held        string // an id another operation holds
		unbatchable string // an id whose rules the batch cannot write
		tornDown    string // an id torn down after the pass read it
		wantBatch   []string
		wantADD     []string // ids the plugins' ADD repaired
		wantWhole   []string
	}{
		{name: "every drifting attachment's rules in one batch, none by its plugins' ADD",
			wantBatch: []string{"a", "b", "c"}, wantWhole: []string{"a", "b", "c"}},
		{name: "an attachment another operation holds is left for a later pass", held: "b",
			wantBatch: []string{"a", "c"}, wantWhole: []string{"a", "c"}},
		{name: "an attachment whose rules the batch cannot write is repaired by its plugins' ADD", unbatchable: "b",
			wantBatch: []string{"a", "c"}, wantADD: []string{"b"}, wantWhole: []string{"a", "b", "c"}},
		{name: "an attachment torn down since the pass read it gets nothing back", tornDown: "b",
			wantBatch: []string{"a", "c"}, wantWhole: []string{"a", "c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeParts()
			f.batching, f.unbatchable = true, map[string]bool{tc.unbatchable: true}
			keys := map[string]identity.Key{}
			for _, id := range []string{"a", "b", "c"} {
				keys[id] = f.attach(id)
				f.drift(keys[id], true)
			}
			f.hold(tc.held, true)
			if tc.tornDown != "" {
				f.afterCheck = func(reads int) {
					if reads == 1 { // the pass's own check, before the batch's locks
						f.forget(keys[tc.tornDown])
					}
				}
			}
			cfg, log := testConfig(t, time.Hour)
			w := New(cfg, f)
			w.Pass(t.Context())

			if len(f.batches) != 1 {
				t.Fatalf("%d batches, want one: %v", len(f.batches), f.batches)
			}
			var got []string
			for _, k := range f.batches[0] {
				got = append(got, k.ID)
			}
			if !slices.Equal(got, tc.wantBatch) {
				t.Errorf("the batch wrote for %v, want %v", got, tc.wantBatch)
			}
			if len(f.unlocked) > 0 {
				t.Errorf("the batch wrote for %v without holding their locks", f.unlocked)
			}
			for _, id := range []string{"a", "b", "c"} {
				if n, want := f.repairsOf(keys[id]), btoi(slices.Contains(tc.wantADD, id)); n != want {
					t.Errorf("%s: %d repairs by its plugins' ADD, want %d", id, n, want)
				}
				whole := len(f.missing[keys[id]]) == 0
				if whole != slices.Contains(tc.wantWhole, id) {
					t.Errorf("%s whole after the pass: %v, want %v", id, whole, !whole)
				}
				logged := strings.Contains(log.String(), fmt.Sprintf("attachment repaired: alloc_id=%s ", id))
				if logged != slices.Contains(tc.wantWhole, id) {
					t.Errorf("%s logged as repaired: %v, want %v", id, logged, !logged)
				}
			}
			for id, n := range f.entered {
				if n != 0 {
					t.Errorf("%s's lock still held after the pass (%d)", id, n)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
