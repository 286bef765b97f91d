package footprint_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/fakeipt"
	"github.com/seed1280861d/cninet/internal/fakenft"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// listingCalls returns the calls of the fakes that read whole chains or
// tables: what a Teardown on a clean host must not need.
func listingCalls(s *scenario) []string {
	var calls []string
	for _, c := range s.nft.Calls() {
		if c == "ListRules" {
			calls = append(calls, "nft "+c)
		}
	}
	for i, ipt := range s.ipt {
		for _, c := range ipt.Calls() {
			if op := strings.SplitN(c, " ", 2)[0]; op == "List" || op == "ListTable" || op == "SaveAll" {
				calls = append(calls, familyLabel(i)+" "+c)
			}
		}
	}
	return calls
}

func TestTeardownReadsOnlyWhatItsAttachmentCanOwnWhereTheHostCanBeProbed(t *testing.T) {
	cases := []struct {
		name        string
		capture     string // what the host holds when Remember runs
		files       []hostFile
		id          string
		hostportNFT bool
		del         func(t *testing.T, s *scenario) // the plugins' DEL
		listings    []string                        // must be among what is listed; nil: nothing may be
		restored    int
	}{
		{
			name:    "after a DEL that removed everything nothing is listed",
			capture: "single-after-del", files: join(net1Dir, web1Files), id: "web-1",
			del: func(t *testing.T, s *scenario) { s.remove(t, paths(web1Files)) },
		},
		{
			name:    "the attachment's own hostport rules need no guard before its DEL",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", hostportNFT: true,
			del: func(t *testing.T, s *scenario) {
				if slices.Contains(s.nft.Calls(), "ListRules") {
					t.Errorf("the guard listed the hostport tables: %q", s.nft.Calls())
				}
				s.nft = loadNFT(t, "single-after-del")
				s.ipt = [2]*fakeipt.IPTables{loadIPT(t, "single-after-del", false), loadIPT(t, "single-after-del", true)}
				s.remove(t, paths(web1Files))
			},
		},
		{
			name:    "another network's hostport rules of the same id are guarded, listed and added back",
			capture: "two-networks-same-id", files: join(same1Net1Files), id: "same-1", hostportNFT: true,
			del:      func(t *testing.T, s *scenario) { delByID(t, s.nft, "same-1") },
			listings: []string{"nft ListRules", "nft ListRules"}, restored: 5,
		},
		{
			name:    "rules a DEL left behind are listed and removed",
			capture: "leaked-no-del", id: "crash-1",
			files:    join(net1Dir3, live1Reserved, crash1Reserved, []hostFile{live1Cached, crash1Cached}),
			del:      func(t *testing.T, s *scenario) {},
			listings: []string{"nft ListRules"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, tc.capture, nftnet1, "eth0", tc.files)
			s.net.HostportNFT = tc.hostportNFT
			cl := footprint.NewCleaner(context.Background(), s.net, footprint.Host{
				IPTables: func(v6 bool) (footprint.IPTables, error) {
					return fakeipt.Probing{Saving: fakeipt.Saving{Batching: &fakeipt.Batching{IPTables: s.ipt[b2i(v6)]}}}, nil
				},
				NFTables: func() (footprint.NFTables, error) { return fakenft.Matching{NFTables: s.nft}, nil },
			})
			cl.Remember([]string{tc.id})
			tc.del(t, s)
			items, err := cl.Clean([]string{tc.id})
			if err != nil {
				t.Fatal(err)
			}
			got := listingCalls(s)
			if tc.listings == nil {
				// Only what the attachment can own, on a host the probes read.
				if len(got) > 0 {
					t.Errorf("listed %q", got)
				}
			}
			for _, want := range tc.listings {
				if i := slices.Index(got, want); i < 0 {
					t.Errorf("did not list %q (listed %q)", want, got)
				} else {
					got = slices.Delete(got, i, i+1)
				}
			}
			if n := len(cl.Restored()); n != tc.restored {
				t.Errorf("restored %d rules, want %d: %v", n, tc.restored, cl.Restored())
			}
			for _, r := range s.nft.Rules() {
				if r.Comment == tc.id && (strings.HasPrefix(r.DNAT.String(), "198.18.1.") || strings.HasPrefix(r.DNAT.String(), "fd00:198:18:0:1:")) {
					t.Errorf("left %s", r)
				}
			}
			if tc.capture == "leaked-no-del" && countKind(items, footprint.KindNFTRule) == 0 {
				t.Error("removed no nftables rule of what the DEL left")
			}
		})
	}
}

func TestFailingProbesFallBackToListing(t *testing.T) {
	s := newScenario(t, "leaked-no-del", nftnet1, "eth0", join(net1Dir3, live1Reserved, crash1Reserved, []hostFile{live1Cached, crash1Cached}))
	probeErr := errors.New("netlink: operation not permitted")
	cl := footprint.NewCleaner(context.Background(), s.net, footprint.Host{
		IPTables: func(v6 bool) (footprint.IPTables, error) {
			return fakeipt.Probing{Saving: fakeipt.Saving{Batching: &fakeipt.Batching{IPTables: s.ipt[b2i(v6)]}}, FailProbe: probeErr}, nil
		},
		NFTables: func() (footprint.NFTables, error) {
			return fakenft.Matching{NFTables: s.nft, FailMatch: probeErr}, nil
		},
	})
	cl.Remember([]string{"crash-1"})
	items, err := cl.Clean([]string{"crash-1"})
	if err != nil {
		t.Fatalf("Clean: %v; a failed probe must only cost a listing", err)
	}
	if countKind(items, footprint.KindNFTRule) == 0 || countKind(items, footprint.KindRule) == 0 {
		t.Errorf("removed %v; want the leaked nftables and firewall rules", items)
	}
	if got := listingCalls(s); !slices.Contains(got, "nft ListRules") || !slices.Contains(got, "iptables List filter CNI-FORWARD") {
		t.Errorf("listed %q; want nftables and CNI-FORWARD listed", got)
	}
}
