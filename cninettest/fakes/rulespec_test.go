package fakes_test

import (
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
)

func TestFormatRulePrintsARuleAsIPTablesListsIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec []string
		want string
	}{
		{"a rule as iptables -S prints it comes back as it was",
			[]string{"-s", "198.18.0.2/32", "-m", "comment", "--comment", `name: "n" id: "a"`, "-j", "CNI-A"},
			`-s 198.18.0.2/32 -m comment --comment "name: \"n\" id: \"a\"" -j CNI-A`},
		{"the bridge plugin's words: the target after the matches",
			[]string{"-d", "198.18.0.0/24", "-j", "ACCEPT", "-m", "comment", "--comment", `name: "n" id: "a"`},
			`-d 198.18.0.0/24 -m comment --comment "name: \"n\" id: \"a\"" -j ACCEPT`},
		{"a negated address keeps its !",
			[]string{"!", "-d", "224.0.0.0/4", "-j", "MASQUERADE", "-m", "comment", "--comment", "c"},
			`! -d 224.0.0.0/4 -m comment --comment c -j MASQUERADE`},
		{"a lone address is a prefix, a prefix masked",
			[]string{"-s", "198.18.0.2", "-d", "fd00:198:18::5/64", "-j", "ACCEPT"},
			`-s 198.18.0.2/32 -d fd00:198:18::/64 -j ACCEPT`},
		{"the addresses, interfaces and protocol first, in iptables' order",
			[]string{"-p", "tcp", "-o", "cni0", "-d", "198.18.0.2/32", "-s", "198.18.0.3/32", "-j", "ACCEPT"},
			`-s 198.18.0.3/32 -d 198.18.0.2/32 -o cni0 -p tcp -j ACCEPT`},
		{"a protocol's option brings in its match",
			[]string{"-p", "tcp", "--dport", "8080", "-j", "DNAT", "--to-destination", "198.18.0.2:80"},
			`-p tcp -m tcp --dport 8080 -j DNAT --to-destination 198.18.0.2:80`},
		{"a negated match option keeps its place",
			[]string{"-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"},
			`-m conntrack ! --ctstate RELATED,ESTABLISHED -j ACCEPT`},
		{"a comment that looks like an option is the comment's",
			[]string{"-j", "ACCEPT", "-m", "comment", "--comment", "-s"},
			`-m comment --comment -s -j ACCEPT`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fakes.FormatRule(tc.spec); got != tc.want {
				t.Errorf("FormatRule(%q)\n  = %s\nwant %s", tc.spec, got, tc.want)
			}
		})
	}
}
