package footprint

import (
	"fmt"
	"slices"
	"testing"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// A Report keeps each change as a compact entry and renders the same Item
// a run reported before entries were compact.
func TestAReportRendersEachShapeAsItsItem(t *testing.T) {
	a, b := Attachment{"n", "a"}, Attachment{"m", "b"}
	jump := &iptables.Rule{Line: `-A POSTROUTING -s 198.18.0.2/32 -j CNI-x`, Chain: postrouting}
	nft := &host.NFTRule{Family: "ip", Table: "cni_hostport", Chain: "hostports", Handle: 4}
	v4, v6 := &iptView{}, &iptView{v6: true}
	var rep Report
	rep.note(a, iptEntry(v4, iptChange{table: natTable, rule: jump}))
	rep.note(a, iptEntry(v6, iptChange{table: natTable, chain: "CNI-x"}))
	rep.note(b, nftEntry(nftChange{rule: nft}))
	rep.note(b, entry{detail: "/run/cni/m/198.18.0.3", shape: fileShape(KindReservation)})
	rep.note(a, entry{detail: "/var/lib/cni/results/n-a-eth0", shape: fileShape(KindCachedResult)})
	rep.note(a, entry{detail: "bwp0123", shape: shapeLink})
	rep.note(b, entry{detail: "/var/lib/cni/cninet/withheld/m/b", shape: fileShape(KindIntentRecord)})
	want := []Item{
		{KindRule, "a", "n", "iptables", "iptables nat rule " + jump.Line},
		{KindChain, "a", "n", "ip6tables", "ip6tables nat chain CNI-x"},
		{KindNFTRule, "b", "m", "nftables", "nftables rule ip cni_hostport hostports handle 4"},
		{KindReservation, "b", "m", "files", "/run/cni/m/198.18.0.3"},
		{KindCachedResult, "a", "n", "files", "/var/lib/cni/results/n-a-eth0"},
		{KindLink, "a", "n", "links", "device bwp0123"},
		{KindIntentRecord, "b", "m", "files", "/var/lib/cni/cninet/withheld/m/b"},
	}
	if got := rep.Removed(); !slices.Equal(got, want) {
		t.Errorf("Removed() =\n%q\nwant\n%q", got, want)
	}
	if rep.Len() != 7 || rep.Count(KindRule) != 1 || rep.Count(KindNFTRule) != 1 || rep.Count(KindTuningFile) != 0 {
		t.Errorf("Len %d, Count(rule) %d, Count(nft rule) %d, Count(tuning) %d; want 7, 1, 1, 0",
			rep.Len(), rep.Count(KindRule), rep.Count(KindNFTRule), rep.Count(KindTuningFile))
	}
	if ids := rep.IDs(); !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("IDs() = %q, want a, b (the restored one's id only as a remover's)", ids)
	}
	var seen []Item
	rep.Each(func(it Item) bool { seen = append(seen, it); return len(seen) < 2 })
	if !slices.Equal(seen, want[:2]) {
		t.Errorf("Each stopped after %q, want the first two", seen)
	}
	var none *Report
	if none.Len() != 0 || none.Removed() != nil || none.IDs() != nil {
		t.Error("a nil Report is not empty")
	}
}

// A report keeps its entries in blocks; across them they read in the
// order they were noted, every way.
func TestAReportReadsItsEntriesInOrderAcrossBlocks(t *testing.T) {
	var rep Report
	n := 2*entryBlock + 3
	for i := range n {
		rep.note(Attachment{"n", fmt.Sprint(i % 7)}, entry{detail: fmt.Sprint(i), shape: shapeLink})
	}
	i := 0
	rep.Each(func(it Item) bool {
		if it.Detail != fmt.Sprintf("device %d", i) {
			t.Fatalf("item %d reads %q", i, it.Detail)
		}
		i++
		return true
	})
	removed := rep.Removed()
	if i != n || rep.Len() != n || len(removed) != n || removed[n-1].Detail != fmt.Sprintf("device %d", n-1) || rep.Count(KindLink) != n || len(rep.IDs()) != 7 {
		t.Errorf("Each %d, Len %d, Removed %d (last %v), Count %d, IDs %v; want %d items in order of 7 ids", i, rep.Len(), len(removed), removed[len(removed)-1], rep.Count(KindLink), rep.IDs(), n)
	}
}
