package footprint_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
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
		capture     string // what the host holds when Prevent runs
		files       []hostFile
		id          string
		hostportNFT bool
		del         func(t *testing.T, s *scenario, p footprint.Prevention) // the plugins' DEL, as Prevent left it
		listings    []string                                                // must be among what is listed; nil: nothing may be
		omitted     bool                                                    // portmap is left out of the DEL
	}{
		{
			name:    "after a DEL that removed everything nothing is listed",
			capture: "single-after-del", files: join(net1Dir, web1Files), id: "web-1",
			del: func(t *testing.T, s *scenario, _ footprint.Prevention) { s.remove(t, paths(web1Files)) },
		},
		{
			name:    "the attachment's own hostport rules need no listing before its DEL",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", hostportNFT: true,
			del: func(t *testing.T, s *scenario, _ footprint.Prevention) {
				if slices.Contains(s.nft.Calls(), "ListRules") {
					t.Errorf("Prevent listed the hostport tables: %q", s.nft.Calls())
				}
				s.nft = loadNFT(t, "single-after-del")
				s.ipt = [2]*fakes.IPTables{loadIPT(t, "single-after-del", false), loadIPT(t, "single-after-del", true)}
				s.remove(t, paths(web1Files))
			},
		},
		{
			name:    "another network's hostport rules of the same id keep portmap out of the DEL",
			capture: "two-networks-same-id", files: join(same1Net1Files), id: "same-1", hostportNFT: true,
			del:      delByIDUnlessOmitted("same-1"),
			listings: []string{"nft ListRules"}, omitted: true,
		},
		{
			name:    "rules a DEL left behind are listed and removed",
			capture: "leaked-no-del", id: "crash-1",
			files:    join(net1Dir3, live1Reserved, crash1Reserved, []hostFile{live1Cached, crash1Cached}),
			del:      func(*testing.T, *scenario, footprint.Prevention) {},
			listings: []string{"nft ListRules"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, tc.capture, nftnet1, "eth0", tc.files)
			s.net.HostportNFT = tc.hostportNFT
			cl := footprint.NewCleaner(context.Background(), s.net, footprint.Seams{
				IPTables: func(v6 bool) (host.IPTables, error) {
					return fakes.NewProbing(s.ipt[b2i(v6)]), nil
				},
				NFTables: func() (host.NFTables, error) { return fakes.Matching{NFTables: s.nft}, nil },
			})
			before := hostportRules(s.nft.Rules(), "198.18.2.")
			p, err := cl.Prevent([]string{tc.id})
			if err != nil {
				t.Fatal(err)
			}
			tc.del(t, s, p)
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
			if omitted := slices.Contains(p.Omit, "portmap"); omitted != tc.omitted {
				t.Errorf("Omit = %q, want portmap left out: %v", p.Omit, tc.omitted)
			}
			if after := hostportRules(s.nft.Rules(), "198.18.2."); !slices.Equal(after, before) {
				t.Errorf("network 2's hostport rules: %q, were %q", after, before)
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
	cl := footprint.NewCleaner(context.Background(), s.net, footprint.Seams{
		IPTables: func(v6 bool) (host.IPTables, error) {
			return fakes.NewProbing(s.ipt[b2i(v6)]).FailingWith(probeErr), nil
		},
		NFTables: func() (host.NFTables, error) {
			return fakes.Matching{NFTables: s.nft, FailMatch: probeErr}, nil
		},
	})
	cl.Prevent([]string{"crash-1"})
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

// A stale cached result of ghost names live-1's addresses, and only
// live-1's nftables rules say someone else holds them: the firewall rules
// of those addresses are live-1's, whether the tables were listed up
// front or only when the rules came to be judged.
func TestDeferredNFTablesEvidenceStillProtectsAnotherAttachmentsFirewallRules(t *testing.T) {
	for _, probed := range []bool{false, true} {
		t.Run(map[bool]string{false: "listed", true: "probed"}[probed], func(t *testing.T) {
			files := join(net1Dir3, crash1Reserved, []hostFile{crash1Cached,
				cached(nftnet1, "eth0", "ghost", "198.18.1.2", "fd00:198:18:0:1::2")})
			s := newScenario(t, "leaked-no-del", nftnet1, "eth0", files)
			before := [2]string{s.ipt[0].Save("filter"), s.ipt[1].Save("filter")}
			seams := s.seams(s.nft)
			if probed {
				seams = s.probedSeams()
			}
			cl := footprint.NewCleaner(context.Background(), s.net, seams)
			cl.Prevent([]string{"ghost"})
			if _, err := cl.Clean([]string{"ghost"}); err != nil {
				t.Fatal(err)
			}
			for i := range s.ipt {
				if got := s.ipt[i].Save("filter"); got != before[i] {
					t.Errorf("%s filter changed:\n%s\nwas:\n%s", familyLabel(i), got, before[i])
				}
			}
			if probed && !slices.Contains(s.nft.Calls(), "ListRules") {
				t.Error("the rules were judged without listing the nftables tables")
			}
		})
	}
}

func TestAFailingMatcherMeansListing(t *testing.T) {
	probeErr := errors.New("netlink: operation not permitted")
	t.Run("after DEL, without any firewall evidence", func(t *testing.T) {
		s := newScenario(t, "leaked-ns-deleted", nftnet1, "eth0", nil)
		cl := footprint.NewCleaner(context.Background(), s.net, footprint.Seams{
			IPTables: func(v6 bool) (host.IPTables, error) {
				return fakes.NewProbing(s.ipt[b2i(v6)]).FailingWith(probeErr), nil
			},
			NFTables: func() (host.NFTables, error) { return fakes.Matching{NFTables: s.nft, FailMatch: probeErr}, nil },
		})
		cl.Prevent([]string{"gone-1"})
		items, err := cl.Clean([]string{"gone-1"})
		if err != nil {
			t.Fatal(err)
		}
		if countKind(items, footprint.KindNFTRule) == 0 || !slices.Contains(s.nft.Calls(), "ListRules") {
			t.Errorf("removed %v after calls %q; want the tables listed and gone-1's rules removed", items, s.nft.Calls())
		}
	})
	t.Run("before DEL, another network's hostport rules of the id keep portmap out", func(t *testing.T) {
		s := newScenario(t, "two-networks-same-id", nftnet1, "eth0", join(same1Net1Files))
		s.net.HostportNFT = true
		cl := footprint.NewCleaner(context.Background(), s.net, footprint.Seams{
			IPTables: func(v6 bool) (host.IPTables, error) { return s.ipt[b2i(v6)], nil },
			NFTables: func() (host.NFTables, error) { return fakes.Matching{NFTables: s.nft, FailMatch: probeErr}, nil },
		})
		before := hostportRules(s.nft.Rules(), "198.18.2.")
		p, err := cl.Prevent([]string{"same-1"})
		if err != nil {
			t.Fatal(err)
		}
		delByIDUnlessOmitted("same-1")(t, s, p)
		if _, err := cl.Clean([]string{"same-1"}); err != nil {
			t.Fatal(err)
		}
		if after := hostportRules(s.nft.Rules(), "198.18.2."); !slices.Contains(p.Omit, "portmap") || !slices.Equal(after, before) || len(before) == 0 {
			t.Errorf("Omit %q; network 2's hostport rules %q, were %q: want portmap left out and them untouched", p.Omit, after, before)
		}
	})
}
