package iptables

import (
	"bytes"
	"slices"
	"testing"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

func TestAListedRuleIsTakenForTheDumpedRuleOnlyWithItsCommentAddressesAndTarget(t *testing.T) {
	const jump = `-A POSTROUTING -s 198.18.0.5/32 -m comment --comment "name: \"n\" id: \"ab\"" -j CNI-0123`
	xt := func(comment string, rest ...[]byte) []byte {
		return append(append([]byte("match comment\x00...."), nfnetlink.XtCommentNeedle(comment)...), bytes.Join(rest, []byte(" "))...)
	}
	addr := []byte{198, 18, 0, 5}
	for _, tc := range []struct {
		name string
		line string
		pos  int
		rule nfnetlink.Rule
		want bool
	}{
		{"the same comment, address and jump at the same place", jump, 3, nfnetlink.Rule{Handle: 9, Expr: xt(`name: "n" id: "ab"`, addr, []byte("CNI-0123"))}, true},
		{"another place in the chain", jump, 2, nfnetlink.Rule{Handle: 9, Expr: xt(`name: "n" id: "ab"`, addr, []byte("CNI-0123"))}, false},
		{"a comment naming a longer id", jump, 3, nfnetlink.Rule{Handle: 9, Expr: xt(`name: "n" id: "abc"`, addr, []byte("CNI-0123"))}, false},
		{"a comment that only ends the same way", jump, 3, nfnetlink.Rule{Handle: 9, Expr: xt(`xname: "n" id: "ab"`, addr, []byte("CNI-0123"))}, false},
		{"another address", jump, 3, nfnetlink.Rule{Handle: 9, Expr: xt(`name: "n" id: "ab"`, []byte{198, 18, 0, 6}, []byte("CNI-0123"))}, false},
		{"another jump target", jump, 3, nfnetlink.Rule{Handle: 9, Expr: xt(`name: "n" id: "ab"`, addr, []byte("CNI-9999"))}, false},
		{"the comment in user data, as newer iptables-nft keeps it", jump, 3, nfnetlink.Rule{Handle: 9, Comment: `name: "n" id: "ab"`, Expr: append(addr, "CNI-0123"...)}, true},
		{"a rule without comment is not one with a comment match", "-A CNI-FORWARD -s 198.18.0.5/32 -j ACCEPT", 0,
			nfnetlink.Rule{Handle: 4, Expr: append(xt("x"), addr...)}, false},
		{"a comment-less firewall rule with its address", "-A CNI-FORWARD -s 198.18.0.5/32 -j ACCEPT", 0, nfnetlink.Rule{Handle: 4, Expr: addr}, true},
		{"DNAT to the address and port", "-A CNI-DN-1 -p tcp -m tcp --dport 80 -j DNAT --to-destination 198.18.0.5:8080", 1,
			nfnetlink.Rule{Handle: 4, Expr: append(addr, "DNAT"...)}, true},
		{"a prefix compares its whole bytes only", "-A CNI-0123 -d 198.18.0.0/24 -j ACCEPT", 0, nfnetlink.Rule{Handle: 4, Expr: []byte{198, 18, 0}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, ok := iptablesTarget(host.ListedRule{Line: tc.line, Position: tc.pos})
			if !ok {
				t.Fatalf("iptablesTarget(%q) refused the line", tc.line)
			}
			pos := 3
			if tc.line != jump {
				pos = tc.pos
			}
			if got := target.Matches(pos, tc.rule); got != tc.want {
				t.Errorf("matches = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestAddressArgumentsLeaveTheseBytesInARule(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want []byte
		ok   bool
	}{
		{"198.18.0.5/32", []byte{198, 18, 0, 5}, true},
		{"198.18.0.5", []byte{198, 18, 0, 5}, true},
		{"198.18.0.5:8080", []byte{198, 18, 0, 5}, true},
		{"198.18.0.5:8080-8090", []byte{198, 18, 0, 5}, true},
		{"198.18.0.5-198.18.0.9", []byte{198, 18, 0, 5}, true},
		{"198.18.1.7/20", []byte{198, 18, 0}, true},
		{"224.0.0.0/4", []byte{224}, true},
		{"[fd00:198:18::5]:80", []byte{0xfd, 0, 1, 0x98, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, true},
		{"ff00::/8", []byte{0xff}, true},
		{"0.0.0.0/0", []byte{}, true},
		{"eth0", nil, false},
	} {
		got, ok := addrNeedle(tc.arg)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("addrNeedle(%q) = %v, %v; want %v, %v", tc.arg, got, ok, tc.want, tc.ok)
		}
	}
}
