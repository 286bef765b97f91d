package fakes_test

import (
	"slices"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
)

const natListing = `-N CNI-A
-A POSTROUTING -s 198.18.0.2/32 -j CNI-A
-A POSTROUTING -s 198.18.0.3/32 -j MASQUERADE
-A POSTROUTING -s 198.18.0.2/32 -j CNI-A
-A CNI-A -j MASQUERADE`

func TestRestoreNoFlushAppliesEveryLineInOrderOrNone(t *testing.T) {
	tests := []struct {
		name      string
		lines     []string
		wantErr   bool
		wantPost  []string
		wantChain bool // CNI-A still there
	}{
		{"a deletion takes the first matching rule only",
			[]string{"-D POSTROUTING -s 198.18.0.2/32 -j CNI-A"}, false,
			[]string{"-A POSTROUTING -s 198.18.0.3/32 -j MASQUERADE", "-A POSTROUTING -s 198.18.0.2/32 -j CNI-A"}, true},
		{"a chain goes once nothing jumps to it any more",
			[]string{"-D POSTROUTING -s 198.18.0.2/32 -j CNI-A", "-D POSTROUTING -s 198.18.0.2/32 -j CNI-A", "-F CNI-A", "-X CNI-A"}, false,
			[]string{"-A POSTROUTING -s 198.18.0.3/32 -j MASQUERADE"}, false},
		{"a rule appended in the batch can be deleted in it",
			[]string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", "-D POSTROUTING -s 198.18.0.3/32 -j MASQUERADE", "-D POSTROUTING -s 198.18.0.9/32 -j ACCEPT"}, false,
			[]string{"-A POSTROUTING -s 198.18.0.2/32 -j CNI-A", "-A POSTROUTING -s 198.18.0.2/32 -j CNI-A"}, true},
		{"a rule that is not there fails the whole batch",
			[]string{"-D POSTROUTING -s 198.18.0.3/32 -j MASQUERADE", "-D POSTROUTING -s 198.18.0.3/32 -j MASQUERADE"}, true,
			nil, true},
		{"a chain still jumped to cannot go",
			[]string{"-D POSTROUTING -s 198.18.0.2/32 -j CNI-A", "-F CNI-A", "-X CNI-A"}, true,
			nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ipt := fakes.NewIPTables().Load("nat", natListing)
			before := ipt.Rules("nat", "POSTROUTING")
			err := (&fakes.Batching{IPTables: ipt}).RestoreNoFlush("nat", tt.lines)
			if (err != nil) != tt.wantErr {
				t.Fatalf("RestoreNoFlush: error %v, want an error %v", err, tt.wantErr)
			}
			want := tt.wantPost
			if tt.wantErr {
				want = before // all or nothing
			}
			if got := ipt.Rules("nat", "POSTROUTING"); !slices.Equal(got, want) {
				t.Errorf("POSTROUTING:\n%q\nwant\n%q", got, want)
			}
			if got := ipt.HasChain("nat", "CNI-A"); got != tt.wantChain {
				t.Errorf("chain CNI-A there: %v, want %v", got, tt.wantChain)
			}
		})
	}
}
