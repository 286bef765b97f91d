package footprint

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// sweepNat is a nat table with a shared chain (POSTROUTING) and two
// attachments' own chains, one of them empty.
const sweepNat = `-P POSTROUTING ACCEPT
-N CNI-aaaa
-N CNI-empty
-A POSTROUTING -s 198.18.0.2/32 -m comment --comment "name: \"n\" id: \"a\"" -j CNI-aaaa
-A CNI-aaaa -d 198.18.0.0/24 -m comment --comment "name: \"n\" id: \"a\"" -j ACCEPT
-A CNI-aaaa ! -d 224.0.0.0/4 -m comment --comment "name: \"n\" id: \"a\"" -j MASQUERADE`

// A sweep's whole-table listing keeps the rules of the shared chains
// only; of an attachment's own chain it keeps that it exists and its first
// rule's comment. A footprint that reads such a chain rule by rule gets
// every rule, listed alone.
func TestASweepKeepsTheRulesOfSharedChainsOnly(t *testing.T) {
	ipt := fakes.NewIPTables().Load("nat", sweepNat)
	f := &iptView{ipt: &fakes.Batching{IPTables: ipt}, whole: true, errs: &errList{}}
	l := f.listing("nat", postrouting)
	if got := len(l.Chains[postrouting]); got != 1 {
		t.Errorf("POSTROUTING kept %d rules, want 1", got)
	}
	if _, kept := l.Chains["CNI-aaaa"]; kept {
		t.Error("the rules of an attachment's chain were kept by the table listing")
	}
	for _, chain := range []string{"CNI-aaaa", "CNI-empty", postrouting} {
		if !f.hasChain("nat", chain) {
			t.Errorf("hasChain(%s) = false, want true", chain)
		}
	}
	if f.hasChain("nat", "CNI-none") {
		t.Error("hasChain(CNI-none) = true for a chain that does not exist")
	}
	heads := map[string]string{}
	l.EachHead(func(chain, comment string) { heads[chain] = comment })
	if want := `name: "n" id: "a"`; heads["CNI-aaaa"] != want || heads["CNI-empty"] != "" || heads[postrouting] != want {
		t.Errorf("heads = %q, want CNI-aaaa and POSTROUTING with %q, CNI-empty with none", heads, want)
	}
	rules, ok := f.rules("nat", "CNI-aaaa")
	if !ok || len(rules) != 2 || !strings.Contains(rules[1].Line, "MASQUERADE") {
		t.Errorf("rules(CNI-aaaa) = %d rules, %v; want both, listed alone", len(rules), ok)
	}
	if calls := ipt.Calls(); !slices.Contains(calls, "List nat CNI-aaaa") {
		t.Errorf("calls %q, want CNI-aaaa listed alone", calls)
	}
}

// A rule's position is its index in its chain, and only a rule of the
// listing the view holds now has one.
func TestAPositionIsOfTheListingHeldNow(t *testing.T) {
	ipt := fakes.NewIPTables().Load("nat", sweepNat)
	f := &iptView{ipt: ipt, errs: &errList{}}
	rules, _ := f.rules("nat", "CNI-aaaa")
	if p := position(f, "nat", &rules[1]); p != 1 {
		t.Errorf("position = %d, want 1", p)
	}
	f.forget("nat", "CNI-aaaa")
	if p := position(f, "nat", &rules[1]); p != -1 {
		t.Errorf("position of a rule of a listing read again since = %d, want -1", p)
	}
}

// onListTable is a table lister that calls before first.
type onListTable struct {
	*fakes.Batching
	before func()
}

func (o onListTable) ListTable(table string) ([]string, error) {
	o.before()
	return o.Batching.ListTable(table)
}

// A sweep holds one family's listings at a time: DiscoverAll keeps only
// the last family it listed, and CleanAll drops it before it lists the
// other again.
func TestASweepHoldsOneFamilysListingsAtATime(t *testing.T) {
	chain := Attachment{"n", "a"}.MasqChain()
	nat4 := strings.ReplaceAll(sweepNat, "CNI-aaaa", chain)
	nat6 := strings.NewReplacer("198.18.0.2/32", "fd00:198:18::2/128", "198.18.0.0/24", "fd00:198:18::/64").Replace(nat4)
	ipt := [2]*fakes.IPTables{fakes.NewIPTables().Load("nat", nat4), fakes.NewIPTables().Load("nat", nat6)}
	var views [2]*iptView
	listedWhileOtherHeld := 0
	host := Seams{
		IPTables: func(v6 bool) (host.IPTables, error) {
			i := b2i(v6)
			return onListTable{&fakes.Batching{IPTables: ipt[i]}, func() {
				if other := views[1-i]; other != nil && other.holdsListing() {
					listedWhileOtherHeld++
				}
			}}, nil
		},
		Networks: []Network{{Name: "n"}},
	}
	c := NewSweep(context.Background(), host)
	found, err := c.DiscoverAll()
	if err != nil || len(found) != 1 {
		t.Fatalf("DiscoverAll = %v, %v; want attachment a", found, err)
	}
	views = c.swept.ipt
	if views[0].holdsListing() || !views[1].holdsListing() {
		t.Fatalf("after DiscoverAll iptables holds a listing: %v, ip6tables: %v; want only the last family's",
			views[0].holdsListing(), views[1].holdsListing())
	}
	if err := c.CleanAll(found); err != nil {
		t.Fatal(err)
	}
	if listedWhileOtherHeld > 0 || views[0].holdsListing() || views[1].holdsListing() {
		t.Errorf("%d listings were read while the other family's was held; after CleanAll: %v, %v held", listedWhileOtherHeld, views[0].holdsListing(), views[1].holdsListing())
	}
	for i, f := range ipt {
		if rules := f.Rules("nat", postrouting); len(rules) != 0 || f.HasChain("nat", chain) {
			t.Errorf("%s: POSTROUTING %q, %s left: %v; want both gone", familyName(i == 1), rules, chain, f.HasChain("nat", chain))
		}
		if n := f.Count("ListTable nat"); n == 0 {
			t.Errorf("%s: nat was never listed", familyName(i == 1))
		}
	}
}

// A family where DiscoverAll found nothing a sweep could remove is not
// listed again: what a workload set up since wrote there is not the
// sweep's to judge.
func TestASweepDoesNotListAgainAFamilyWhereItFoundNothing(t *testing.T) {
	chain := Attachment{"n", "a"}.MasqChain()
	nat6 := strings.NewReplacer("CNI-aaaa", chain, "198.18.0.2/32", "fd00:198:18::2/128", "198.18.0.0/24", "fd00:198:18::/64").Replace(sweepNat)
	ipt := [2]*fakes.IPTables{fakes.NewIPTables().Load("nat", "-N CNI-HOSTPORT-SETMARK"), fakes.NewIPTables().Load("nat", nat6)}
	host := Seams{
		IPTables: func(v6 bool) (host.IPTables, error) { return &fakes.Batching{IPTables: ipt[b2i(v6)]}, nil },
		Networks: []Network{{Name: "n"}},
	}
	c := NewSweep(context.Background(), host)
	found, err := c.DiscoverAll()
	if err != nil || len(found) != 1 {
		t.Fatalf("DiscoverAll = %v, %v; want attachment a", found, err)
	}
	ipt[0].Load("nat", fmt.Sprintf("-A POSTROUTING -s 198.18.0.2/32 -m comment --comment %q -j %s", Attachment{"n", "a"}.MasqComment(), chain))
	if err := c.CleanAll(found); err != nil {
		t.Fatal(err)
	}
	if n := ipt[0].Count("ListTable"); n != 2 {
		t.Errorf("iptables listed %d tables, want nat and filter once: %q", n, ipt[0].Calls())
	}
	if rules := ipt[0].Rules("nat", postrouting); len(rules) != 1 {
		t.Errorf("iptables POSTROUTING = %q, want the rule written after DiscoverAll left alone", rules)
	}
	if rules := ipt[1].Rules("nat", postrouting); len(rules) != 0 || ipt[1].HasChain("nat", chain) {
		t.Errorf("ip6tables POSTROUTING = %q, chain left: %v; want a's gone", rules, ipt[1].HasChain("nat", chain))
	}
}
