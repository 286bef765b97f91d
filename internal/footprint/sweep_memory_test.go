package footprint_test

import (
	"context"
	"slices"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// A sweep of dead workloads (WholeWorkload) lists nftables without the
// rules' expressions, which are most of a listing's size; a Teardown keeps
// them. Either way the same rules go.
func TestASweepOfDeadWorkloadsListsNFTablesWithoutExpressions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sweep     bool
		wantCalls string
	}{
		{"a GC sweep of dead workloads lists brief", true, "ListRulesBrief"},
		{"a Teardown lists with expressions", false, "ListRules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "two-networks-same-id", nftnet1, "eth0", join(same1Net1Files, same1Net2Files))
			seams := s.seams(s.nft)
			seams.Networks = []footprint.Network{s.net}
			dead := footprint.Attachment{Network: nftnet1, ID: "same-1"}
			if tc.sweep {
				sweep := footprint.NewSweep(context.Background(), seams)
				sweep.WholeWorkload = true
				if _, err := sweep.PreventAll([]footprint.Attachment{dead}); err != nil {
					t.Fatal(err)
				}
				if _, err := sweep.DiscoverAll(); err != nil {
					t.Fatal(err)
				}
				if err := sweep.CleanAll([]footprint.Attachment{dead}); err != nil {
					t.Fatal(err)
				}
			} else {
				cl := footprint.NewCleaner(context.Background(), s.net, seams)
				if _, err := cl.Prevent([]string{dead.ID}); err != nil {
					t.Fatal(err)
				}
				if _, err := cl.Clean([]string{dead.ID}); err != nil {
					t.Fatal(err)
				}
			}
			var lists []string
			for _, c := range s.nft.Calls() {
				if c == "ListRules" || c == "ListRulesBrief" {
					lists = append(lists, c)
				}
			}
			if len(lists) == 0 || slices.ContainsFunc(lists, func(c string) bool { return c != tc.wantCalls }) {
				t.Errorf("listings %v, want only %s", lists, tc.wantCalls)
			}
			if left := hostportRules(s.nft.Rules(), "198.18.1."); len(left) > 0 {
				t.Errorf("same-1's nftnet1 hostport rules left: %q", left)
			}
		})
	}
}
