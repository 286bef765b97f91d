package footprint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/iptables"
)

// chainOf parses listed lines of one chain as a drift check indexes them.
func chainOf(t *testing.T, lines ...string) *chainRules {
	t.Helper()
	var rules []iptables.Rule
	for _, l := range lines {
		r, ok := iptables.ParseRule(l)
		if !ok {
			t.Fatalf("cannot parse %q", l)
		}
		rules = append(rules, r)
	}
	return indexRules(rules)
}

func TestAWantedRuleIsFoundInAListedChainAsIptablesListsIt(t *testing.T) {
	long := strings.Repeat("x", 300) // iptables keeps 255 bytes of a comment
	for _, c := range []struct {
		name  string
		lines []string
		want  wantRule
		found bool
	}{
		{"a bare address is found as the host prefix iptables lists",
			[]string{`-A POSTROUTING -s 198.18.0.2/32 -m comment --comment "name: \"n\" id: \"a\"" -j CNI-aaa`},
			rule("nat", "POSTROUTING", "jump", "-s", "198.18.0.2", "-j", "CNI-aaa", "-m", "comment", "--comment", `name: "n" id: "a"`), true},
		{"an address with its subnet's length is found as the subnet iptables lists",
			[]string{`-A CNI-aaa -d 198.18.0.0/24 -m comment --comment "c" -j ACCEPT`},
			rule("nat", "CNI-aaa", "accept", "-d", "198.18.0.2/24", "-j", "ACCEPT", "-m", "comment", "--comment", "c"), true},
		{"a long option is found by the short one iptables lists",
			[]string{`-A CNI-FORWARD -s 198.18.0.2/32 -j ACCEPT`},
			rule("filter", "CNI-FORWARD", "accept from", "--source", "198.18.0.2", "--jump", "ACCEPT"), true},
		{"another attachment's rule to the same target is not it",
			[]string{`-A CNI-FORWARD -s 198.18.0.3/32 -j ACCEPT`, `-A CNI-FORWARD -d 198.18.0.2/32 -j ACCEPT`},
			rule("filter", "CNI-FORWARD", "accept from", "-s", "198.18.0.2", "-j", "ACCEPT"), false},
		{"a rule lacking one of the options is not it",
			[]string{`-A CNI-FORWARD -d 198.18.0.2/32 -j ACCEPT`},
			rule("filter", "CNI-FORWARD", "accept replies", "-d", "198.18.0.2", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"), false},
		{"a negated option is not the option",
			[]string{`-A CNI-aaa ! -d 224.0.0.0/4 -m comment --comment "c" -j MASQUERADE`},
			rule("nat", "CNI-aaa", "masquerade", "-d", "224.0.0.0/4", "-j", "MASQUERADE"), false},
		{"a negated option is found negated",
			[]string{`-A CNI-aaa ! -d 224.0.0.0/4 -m comment --comment "c" -j MASQUERADE`},
			rule("nat", "CNI-aaa", "masquerade", "!", "-d", "224.0.0.0/4", "-j", "MASQUERADE"), true},
		{"a comment cut as iptables stores it is found by the whole comment",
			[]string{fmt.Sprintf(`-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "%s" -j CNI-DN-aaa`, long[:255])},
			rule("nat", "CNI-HOSTPORT-DNAT", "jump", "-m", "comment", "--comment", long, "-p", "tcp", "-j", "CNI-DN-aaa"), true},
		{"a rule wanted by its comment alone is looked for through the chain",
			[]string{`-A CNI-HOSTPORT-SETMARK -m comment --comment "other" -j RETURN`, `-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000`},
			rule("nat", "CNI-HOSTPORT-SETMARK", "mark", "--comment", "CNI portfwd masquerade mark"), true},
		{"no rule carries the wanted target",
			[]string{`-A POSTROUTING -s 198.18.0.2/32 -j CNI-bbb`},
			rule("nat", "POSTROUTING", "jump", "-s", "198.18.0.2", "-j", "CNI-aaa"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := chainOf(t, c.lines...).has(c.want); got != c.found {
				t.Fatalf("has(%v) = %v in %q, want %v", c.want.opts, got, c.lines, c.found)
			}
		})
	}
}

func TestAmongAThousandAttachmentsRulesEachOneFindsItsOwnOnly(t *testing.T) {
	var lines []string
	for i := range 1000 {
		lines = append(lines, fmt.Sprintf(`-A CNI-FORWARD -d 198.18.%d.%d/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`, i/250, 2+i%250),
			fmt.Sprintf(`-A CNI-FORWARD -s 198.18.%d.%d/32 -j ACCEPT`, i/250, 2+i%250))
	}
	c := chainOf(t, lines...)
	for i := range 1000 {
		addr := fmt.Sprintf("198.18.%d.%d", i/250, 2+i%250)
		if !c.has(rule("filter", "CNI-FORWARD", "from", "-s", addr, "-j", "ACCEPT")) ||
			!c.has(rule("filter", "CNI-FORWARD", "replies", "-d", addr, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")) {
			t.Fatalf("%s's rules not found", addr)
		}
	}
	if c.has(rule("filter", "CNI-FORWARD", "from", "-s", "198.18.4.2", "-j", "ACCEPT")) {
		t.Fatal("the rule of an address no attachment has was found")
	}
	if c.has(rule("filter", "CNI-FORWARD", "from", "-d", "198.18.0.2", "-j", "ACCEPT", "-m", "conntrack", "--ctstate", "NEW")) {
		t.Fatal("a rule was found by its address though another option differs")
	}
}
