package footprint

import (
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/fakeipt"
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
	ipt := fakeipt.New().Load("nat", sweepNat)
	f := &iptView{ipt: &fakeipt.Batching{IPTables: ipt}, whole: true, errs: &errList{}}
	l := f.listing("nat", postrouting)
	if got := len(l.chains[postrouting]); got != 1 {
		t.Errorf("POSTROUTING kept %d rules, want 1", got)
	}
	if _, kept := l.chains["CNI-aaaa"]; kept {
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
	l.eachHead(func(chain, comment string) { heads[chain] = comment })
	if want := `name: "n" id: "a"`; heads["CNI-aaaa"] != want || heads["CNI-empty"] != "" || heads[postrouting] != want {
		t.Errorf("heads = %q, want CNI-aaaa and POSTROUTING with %q, CNI-empty with none", heads, want)
	}
	rules, ok := f.rules("nat", "CNI-aaaa")
	if !ok || len(rules) != 2 || !strings.Contains(rules[1].line, "MASQUERADE") {
		t.Errorf("rules(CNI-aaaa) = %d rules, %v; want both, listed alone", len(rules), ok)
	}
	if calls := ipt.Calls(); !slices.Contains(calls, "List nat CNI-aaaa") {
		t.Errorf("calls %q, want CNI-aaaa listed alone", calls)
	}
}

// A rule's position is its index in its chain, and only a rule of the
// listing the view holds now has one.
func TestAPositionIsOfTheListingHeldNow(t *testing.T) {
	ipt := fakeipt.New().Load("nat", sweepNat)
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
