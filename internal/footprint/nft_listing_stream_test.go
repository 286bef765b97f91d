package footprint

import (
	"net/netip"
	"strings"
	"testing"
)

func TestReadNFTListingTakesEachRuleAsItComes(t *testing.T) {
	const listing = `{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "ip", "name": "cni_hostport"}},
{"rule": {"family": "ip", "table": "cni_hostport", "chain": "hostports", "handle": 7, "comment": "web-1", "expr": [
  {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 8080}},
  {"match": {"op": "==", "left": "not a payload", "right": 1}},
  {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "198.18.0.9"}},
  {"dnat": {"addr": "198.18.0.2", "port": 80}}]}},
{"rule": {"family": "ip", "table": "cni_hostport", "chain": "masquerading", "handle": 8, "comment": "web-1", "expr": []}}]}`
	rules, err := readNFTListing(strings.NewReader(listing))
	if err != nil || len(rules) != 2 {
		t.Fatalf("readNFTListing = %d rules, %v; want 2", len(rules), err)
	}
	r := rules[0]
	if r.Handle != 7 || r.Chain != "hostports" || r.Comment != "web-1" ||
		r.Saddr != netip.MustParseAddr("198.18.0.9") || r.DNAT != netip.MustParseAddr("198.18.0.2") || !strings.Contains(string(r.Expr), `"dnat"`) {
		t.Errorf("rule = %+v; want handle 7, saddr 198.18.0.9, dnat to 198.18.0.2, its expressions kept (an expression of another shape skipped)", r)
	}
	for _, bad := range []string{`{"nftables": {}}`, `[]`, `{"nftables": [{"rule": {"handle": "x"}}]}`, `{"nftables": [{"rule": {"expr": {}}}]}`} {
		if _, err := readNFTListing(strings.NewReader(bad)); err == nil {
			t.Errorf("readNFTListing(%s) accepted it", bad)
		}
	}
}
