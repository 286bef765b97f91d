package nftables

import (
	"net/netip"
	"reflect"
	"slices"
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

// The expressions as nft 1.0.6 lists the plugins' rules (and shapes
// that name no single port) with -j.
func TestReadNFTListingReadsPortsAndVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       host.NFTRule
	}{
		{"tcp dport 28084 dnat to 198.18.1.2:80", `[{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 28084}}, {"dnat": {"addr": "198.18.1.2", "port": 80}}]`,
			host.NFTRule{DPort: 28084, L4Proto: "tcp", DNAT: netip.MustParseAddr("198.18.1.2"), DNATPort: 80}},
		{"udp dport 53 dnat ip to 198.18.1.3:5353 in an inet table", `[{"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 53}}, {"dnat": {"family": "ip", "addr": "198.18.1.3", "port": 5353}}]`,
			host.NFTRule{DPort: 53, L4Proto: "udp", DNAT: netip.MustParseAddr("198.18.1.3"), DNATPort: 5353}},
		{"th dport 99 dnat to [fd00::2]", `[{"match": {"op": "==", "left": {"payload": {"protocol": "th", "field": "dport"}}, "right": 99}}, {"dnat": {"addr": "fd00::2"}}]`,
			host.NFTRule{DPort: 99, DNAT: netip.MustParseAddr("fd00::2")}},
		{"icmp checksum is no port", `[{"match": {"op": "==", "left": {"payload": {"protocol": "icmp", "field": "checksum"}}, "right": 5}}]`, host.NFTRule{}},
		{"a port range is no port", `[{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"range": [8080, 8090]}}}]`, host.NFTRule{}},
		{"tcp dport != 80 is no port", `[{"match": {"op": "!=", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 80}}]`, host.NFTRule{}},
		{"a dnat to a port range has no port", `[{"dnat": {"addr": "198.18.1.2", "port": {"range": [80, 90]}}}]`, host.NFTRule{DNAT: netip.MustParseAddr("198.18.1.2")}},
		{"ip daddr 224.0.0.0/4 return", `[{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"prefix": {"addr": "224.0.0.0", "len": 4}}}}, {"return": null}]`,
			host.NFTRule{Verdict: "return"}},
		{"goto masq_checks", `[{"goto": {"target": "masq_checks"}}]`, host.NFTRule{Verdict: "goto", Target: "masq_checks"}},
		{"jump hostports_all", `[{"jump": {"target": "hostports_all"}}]`, host.NFTRule{Verdict: "jump", Target: "hostports_all"}},
		{"accept", `[{"counter": {"packets": 0, "bytes": 0}}, {"accept": null}]`, host.NFTRule{Verdict: "accept"}},
		{"drop", `[{"drop": null}]`, host.NFTRule{Verdict: "drop"}},
		{"masquerade ends in no verdict", `[{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "198.18.1.2"}}, {"masquerade": null}]`,
			host.NFTRule{Saddr: netip.MustParseAddr("198.18.1.2")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listing := `{"nftables": [{"rule": {"family": "ip", "table": "t", "chain": "c", "handle": 3, "expr": ` + tc.expr + `}}]}`
			rules, err := ParseListing([]byte(listing))
			if err != nil || len(rules) != 1 {
				t.Fatalf("ParseListing = %+v, %v; want one rule", rules, err)
			}
			got := rules[0]
			got.Family, got.Table, got.Chain, got.Handle, got.Expr = "", "", "", 0, nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rule = %+v\nwant   %+v", got, tc.want)
			}
		})
	}
}

// A listing held in chunks gives back what a slice grown by append would
// hold, through every table's dump that began again at any point.
func TestRuleChunksHoldWhatAnAppendedSliceWould(t *testing.T) {
	rule := func(i int) host.NFTRule { return host.NFTRule{Family: "ip", Table: "cni_hostport", Handle: i} }
	type step struct {
		add      int // rules added, numbered on from the last
		truncate int // then kept: -1 keeps all
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"nothing listed holds nothing", nil},
		{"fewer than a chunk", []step{{10, -1}}},
		{"exactly one chunk", []step{{ruleChunk, -1}}},
		{"a chunk and one", []step{{ruleChunk + 1, -1}}},
		{"several chunks", []step{{3*ruleChunk + 7, -1}}},
		{"a dump begun again at the start", []step{{ruleChunk + 5, 0}, {12, -1}}},
		{"a dump begun again mid-chunk", []step{{100, -1}, {ruleChunk, 100}, {ruleChunk + 3, -1}}},
		{"a dump begun again on a chunk's end", []step{{ruleChunk, -1}, {2*ruleChunk + 1, ruleChunk}, {1, -1}}},
		{"a dump begun again one past a chunk's end", []step{{ruleChunk + 1, -1}, {ruleChunk, ruleChunk + 1}, {2, -1}}},
		{"everything forgotten", []step{{2 * ruleChunk, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c ruleChunks
			var want []host.NFTRule
			next := 0
			for _, s := range tc.steps {
				for range s.add {
					c.add(rule(next))
					want = append(want, rule(next))
					next++
				}
				if s.truncate >= 0 {
					c.truncate(s.truncate)
					want = want[:s.truncate]
				}
			}
			got := c.all()
			if !slices.Equal(handlesOf(got), handlesOf(want)) || c.n != len(want) {
				t.Fatalf("held %d rules (n %d), want %d: first difference at %d", len(got), c.n, len(want), firstDifference(handlesOf(got), handlesOf(want)))
			}
			if cap(got) != len(got) {
				t.Errorf("all returned %d rules in a slice of capacity %d, want exactly their number", len(got), cap(got))
			}
			for i, chunk := range c.chunks {
				if i < len(c.chunks)-1 && len(chunk) != ruleChunk || cap(chunk) != ruleChunk {
					t.Errorf("chunk %d of %d holds %d in %d, want full chunks but the last, each of %d", i, len(c.chunks), len(chunk), cap(chunk), ruleChunk)
				}
			}
		})
	}
}

func handlesOf(rules []host.NFTRule) []int {
	var out []int
	for _, r := range rules {
		out = append(out, r.Handle)
	}
	return out
}

func firstDifference(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
