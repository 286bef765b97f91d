package nftables

import (
	"net/netip"
	"strings"
	"testing"
	"unsafe"

	"github.com/seed1280861d/cninet/host"
)

func TestReadNFTListingTakesEachRuleAsItComes(t *testing.T) {
	const listing = `{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "ip", "name": "cni_hostport"}},
{"rule": {"family": "ip", "table": "cni_hostport", "chain": "hostports", "handle": 7, "comment": "web-1", "expr": [
  {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 8080}},
  {"match": {"op": "==", "left": "not a payload", "right": 1}},
  {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "198.18.0.9"}},
  {"dnat": {"addr": "198.18.0.2", "port": 80}}]}},
{"rule": {"family": "ip", "table": "cni_hostport", "chain": "masquerading", "handle": 8, "comment": "web-1", "expr": []}}]}`
	rules, err := readNFTListing(strings.NewReader(listing), true, nil, nil)
	if err != nil || len(rules) != 2 {
		t.Fatalf("readNFTListing = %d rules, %v; want 2", len(rules), err)
	}
	r := rules[0]
	if r.Handle != 7 || r.Chain != "hostports" || r.Comment != "web-1" ||
		r.Saddr != netip.MustParseAddr("198.18.0.9") || r.DNAT != netip.MustParseAddr("198.18.0.2") || !strings.Contains(string(r.Expr), `"dnat"`) {
		t.Errorf("rule = %+v; want handle 7, saddr 198.18.0.9, dnat to 198.18.0.2, its expressions kept (an expression of another shape skipped)", r)
	}
	for _, bad := range []string{`{"nftables": {}}`, `[]`, `{"nftables": [{"rule": {"handle": "x"}}]}`, `{"nftables": [{"rule": {"expr": {}}}]}`} {
		if _, err := readNFTListing(strings.NewReader(bad), true, nil, nil); err == nil {
			t.Errorf("readNFTListing(%s) accepted it", bad)
		}
	}
}

func TestReadNFTListingBriefDropsExpressionsAndKeepsWhatOwnershipReads(t *testing.T) {
	const listing = `{"nftables": [{"rule": {"family": "ip", "table": "cni_hostport", "chain": "hostports", "handle": 7, "comment": "web-1", "expr": [
  {"dnat": {"addr": "198.18.0.2", "port": 80}}]}}]}`
	before := []host.NFTRule{{Family: "inet", Table: "cni_plugins_masquerade", Chain: "masq_checks", Handle: 3}}
	rules, err := readNFTListing(strings.NewReader(listing), false, before, map[string]string{})
	if err != nil || len(rules) != 2 || rules[0].Handle != 3 {
		t.Fatalf("readNFTListing = %+v, %v; want the rule appended after the one given", rules, err)
	}
	if r := rules[1]; r.Expr != nil || r.DNAT != netip.MustParseAddr("198.18.0.2") || r.Handle != 7 || r.Comment != "web-1" {
		t.Errorf("brief rule = %+v; want no Expr, but its handle, comment and dnat address", r)
	}
}

// portmap's rules of one attachment all carry its id: a listing keeps one
// copy of each comment, across its tables.
func TestReadNFTListingSharesEqualComments(t *testing.T) {
	const ip = `{"nftables": [{"rule": {"family": "ip", "table": "cni_hostport", "chain": "hostports", "handle": 7, "comment": "web-1", "expr": []}},
  {"rule": {"family": "ip", "table": "cni_hostport", "chain": "masquerading", "handle": 8, "comment": "web-1", "expr": []}}]}`
	const ip6 = `{"nftables": [{"rule": {"family": "ip6", "table": "cni_hostport", "chain": "hostports", "handle": 3, "comment": "web-1", "expr": []}}]}`
	comments := map[string]string{}
	rules, err := readNFTListing(strings.NewReader(ip), false, nil, comments)
	if err == nil {
		rules, err = readNFTListing(strings.NewReader(ip6), false, rules, comments)
	}
	if err != nil || len(rules) != 3 {
		t.Fatalf("readNFTListing = %+v, %v; want 3 rules", rules, err)
	}
	for _, r := range rules[1:] {
		if r.Comment != "web-1" || unsafe.StringData(r.Comment) != unsafe.StringData(rules[0].Comment) {
			t.Errorf("rule %d's comment %q is a copy of its own; want the first rule's", r.Handle, r.Comment)
		}
	}
}
