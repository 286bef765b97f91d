package footprint

import (
	"os"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/iptables"
)

func TestSaveToListingsReadsIPTablesSaveAsPerTableListings(t *testing.T) {
	dump, err := os.ReadFile("../../testdata/iptables/bridge-dual.iptables-save")
	if err != nil {
		t.Fatal(err)
	}
	tables := iptables.SaveToListings(string(dump))
	nat := iptables.ParseListing(tables["nat"], nil)
	post, ok := nat.Chains["POSTROUTING"]
	if !ok || len(post) != 3 {
		t.Fatalf("POSTROUTING: %d rules (exists %v), want 3", len(post), ok)
	}
	o := Attachment{Network: "nomad", ID: "alloc-1"}
	if rules, ok := nat.Chains[o.DNATChain()]; !ok || len(rules) != 9 {
		t.Fatalf("%s: %d rules (exists %v), want 9", o.DNATChain(), len(rules), ok)
	}
	if !strings.HasPrefix(tables["nat"][0], "-P PREROUTING ACCEPT") {
		t.Errorf("built-in chain rendered as %q, want a -P line", tables["nat"][0])
	}
	if fwd := iptables.ParseListing(tables["filter"], nil).Chains[firewallChain]; len(fwd) != 5 {
		t.Errorf("CNI-FORWARD: %d rules, want 5", len(fwd))
	}
	if _, ok := iptables.ParseListing(tables["filter"], nil).Chains["NOMAD-ADMIN"]; !ok {
		t.Error("an empty user chain (NOMAD-ADMIN) was lost")
	}
}
