package footprint_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// A Teardown's Clean looks up by handle the nftables rules its Prevent
// saw, and reads the plugins' tables again only when one is still there
// or nothing was seen: what it removes never changes.
func TestCleanLooksUpByHandleTheRulesPreventSaw(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capture  string
		files    []hostFile
		id       string
		drop     []string // rules taken out of the capture first
		recheck  bool
		delLeft  []string // of the id's rules, those the DEL leaves
		reused   bool     // after the DEL, another rule takes the handle of ip hostports 11
		matchErr error    // every in-kernel look fails (the tables are listed instead)
		lookErr  error    // every lookup by handle fails
		cleanIDs []string // Clean's ids, when not Prevent's
		wantRead bool     // Clean reads the tables again
		wantLook bool     // Clean looks a rule up by handle
		gone     []string // rules Clean removes
	}{
		{name: "a DEL that removed every rule Prevent saw: each is looked up, the tables are not read again",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", recheck: true, wantLook: true},
		{name: "a hostport rule the DEL left is found by its handle, then the tables are read to remove it",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", recheck: true,
			delLeft: []string{"ip hostports 11"}, wantRead: true, wantLook: true, gone: []string{"ip hostports 11"}},
		{name: "a masquerade rule the DEL left likewise",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", recheck: true,
			delLeft: []string{"inet masq_checks 6"}, wantRead: true, wantLook: true, gone: []string{"inet masq_checks 6"}},
		{name: "a handle that is now another rule's is not the rule seen, and that rule is left alone",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", recheck: true, reused: true, wantLook: true},
		{name: "a look before the DEL that nf_tables did not answer (the tables were listed) keeps nothing",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", recheck: true, matchErr: errors.New("netlink: EPERM"), wantRead: true},
		{name: "a listed look before the DEL keeps nothing, even where it found no hostport rule of the id",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", drop: web1Hostport, recheck: true,
			matchErr: errors.New("netlink: EPERM"), delLeft: []string{"inet masq_checks 6"}, wantRead: true, gone: []string{"inet masq_checks 6"}},
		{name: "a lookup that fails: the tables are read",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", recheck: true, lookErr: errors.New("netlink: EPERM"),
			wantRead: true, wantLook: true},
		{name: "a Clean of other ids than Prevent's reads the tables",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", recheck: true, cleanIDs: []string{"web-1", "web-2"}, wantRead: true},
		{name: "without RecheckByHandle the tables are read again",
			capture: "single", files: join(net1Dir, web1Files), id: "web-1", wantRead: true},
		{name: "another network's hostport rules of the id: Prevent keeps nothing, the tables are read again",
			capture: "two-networks-same-id", files: join(net1Dir, net2Dir, same1Net1Files, same1Net2Files), id: "same-1",
			recheck: true, wantRead: true, gone: web1Hostport}, // portmap was left out: Clean removes nftnet1's by address
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, tc.capture, nftnet1, "eth0", tc.files, tc.drop...)
			s.net.HostportNFT = true
			seams := s.probedSeams()
			seams.NFTables = func() (host.NFTables, error) {
				return fakes.Matching{NFTables: s.nft, FailMatch: tc.matchErr, FailLookup: tc.lookErr}, nil
			}
			cl := footprint.NewCleaner(context.Background(), s.net, seams)
			cl.RecheckByHandle = tc.recheck
			p, err := cl.Prevent([]string{tc.id})
			if err != nil {
				t.Fatal(err)
			}
			del := ownNFTRules(t, s, tc.id, "198.18.1.", "fd00:198:18:0:1::")
			for _, r := range del {
				if slices.Contains(tc.delLeft, ruleKey(r)) || (r.Table == "cni_hostport" && slices.Contains(p.Omit, "portmap")) {
					continue
				}
				if err := s.nft.DeleteRules(context.Background(), host.NFTable{Family: r.Family, Name: r.Table}, []host.NFTRule{r}); err != nil {
					t.Fatal(err)
				}
			}
			var stranger host.NFTRule
			if tc.reused {
				stranger = host.NFTRule{Family: "ip", Table: "cni_hostport", Chain: "hostports", Handle: 11, Comment: "web-9",
					DNAT: netip.MustParseAddr("198.18.1.9")}
				s.nft.Add(stranger)
			}
			before, calls := s.nft.Rules(), len(s.nft.Calls())
			ids := []string{tc.id}
			if tc.cleanIDs != nil {
				ids = tc.cleanIDs
			}
			items, err := cl.Clean(ids)
			if err != nil {
				t.Fatal(err)
			}
			after := s.nft.Calls()[calls:]
			read := slices.ContainsFunc(after, func(c string) bool { return c == "AnyRule" || c == "ListRules" })
			if read != tc.wantRead {
				t.Errorf("Clean's nftables calls %q: tables read again %v, want %v", after, read, tc.wantRead)
			}
			if look := slices.ContainsFunc(after, func(c string) bool { return strings.HasPrefix(c, "LookupRule ") }); look != tc.wantLook {
				t.Errorf("Clean's nftables calls %q: a rule looked up by handle %v, want %v", after, look, tc.wantLook)
			}
			var removed []string
			for _, r := range before {
				if !slices.ContainsFunc(s.nft.Rules(), func(k host.NFTRule) bool { return sameNFTRule(k, r) }) {
					removed = append(removed, ruleKey(r))
				}
			}
			if !slices.Equal(removed, tc.gone) || countKind(items, footprint.KindNFTRule) != len(tc.gone) {
				t.Errorf("Clean removed %q (reported %d), want %q", removed, countKind(items, footprint.KindNFTRule), tc.gone)
			}
			if tc.reused && !slices.ContainsFunc(s.nft.Rules(), func(k host.NFTRule) bool { return sameNFTRule(k, stranger) }) {
				t.Errorf("the rule that took a seen handle is gone")
			}
		})
	}
}

// ownNFTRules returns the rules of id on the addresses of prefixes: its
// masquerade rules and portmap's, as its DEL would remove them.
func ownNFTRules(t *testing.T, s *scenario, id string, prefixes ...string) []host.NFTRule {
	t.Helper()
	var out []host.NFTRule
	for _, r := range s.nft.Rules() {
		mine := r.Comment == id || strings.HasSuffix(r.Comment, "id: "+id)
		onNet := slices.ContainsFunc(prefixes, func(p string) bool { return strings.Contains(r.String(), " "+p) })
		if mine && onNet {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no rule of %s in the capture", id)
	}
	return out
}
