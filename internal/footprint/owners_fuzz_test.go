package footprint

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// FuzzParseRule checks the rule parser on arbitrary lines (it must not
// panic, and must read back what iptables would print) and the ownership
// rule on rules of one attachment judged for another: a rule is never
// claimed for an owner its comment does not name.
func FuzzParseRule(f *testing.F) {
	f.Add(`-A POSTROUTING -s 198.18.0.2/32 -m comment --comment "name: \"nomad\" id: \"alloc-1\"" -j CNI-0123`, "nomad", "alloc-1", "nomad", "alloc-10")
	f.Add(`-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"nomad\" id: \"a\"" -m multiport --dports 80 -j CNI-DN-1`, "my.net", "a.b", "myXnet", "a.b")
	f.Add(`-A CNI-FORWARD -d 198.18.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`, strings.Repeat("n", 100), strings.Repeat("i", 150)+"a", strings.Repeat("n", 100), strings.Repeat("i", 150)+"b")
	f.Add(`-A X "unterminated`, "a", "b", "a", "b\\")
	f.Fuzz(func(t *testing.T, line, netA, idA, netB, idB string) {
		if r, ok := iptables.ParseRule(line); ok {
			fields, _ := iptables.SplitRuleLine(line)
			if r.Chain == "" {
				t.Fatalf("parsed %q into a rule without a chain", line)
			}
			for _, v := range []string{r.Target(), r.Source()} {
				if v != "" && !slices.Contains(fields, v) {
					t.Fatalf("parsed %q with -j or -s %q, not one of its fields", line, v)
				}
			}
		}
		for _, s := range []string{netA, netB, idA, idB} {
			if !IsContainerID(s) { // the CNI rule for network names is the same
				return
			}
		}
		a, b := Attachment{netA, idA}, Attachment{netB, idB}
		masq := mustParse(t, "POSTROUTING", "-s", "198.18.0.2/32", "-m", "comment", "--comment", iptables.StoredComment(a.MasqComment()), "-j", a.MasqChain())
		dnat := mustParse(t, hostportDNATChain, "-p", "tcp", "-m", "comment", "--comment", iptables.StoredComment(a.DNATComment()), "-m", "multiport", "--dports", "80", "-j", a.DNATChain())
		if !a.ownsMasqJump(masq) || !a.ownsDNATJump(dnat) {
			t.Fatalf("%+v does not own its own rules", a)
		}
		if a != b && (b.ownsMasqJump(masq) || b.ownsDNATJump(dnat)) {
			t.Fatalf("%+v claims a rule of %+v", b, a)
		}
		if got, ok := parseMasqComment(masq.Comment); ok && got != a {
			t.Fatalf("%+v's rule is attributed to %+v", a, got)
		}
		known := &view{nets: map[string]Network{netB: {Name: netB}}}
		if got, ok := parseDNATComment(known, dnat.Comment); ok && got != a {
			t.Fatalf("network %q attributes %+v's DNAT rule to %+v", netB, a, got)
		}
	})
}

// mustParse formats a rule as iptables -S prints it and parses it back.
func mustParse(t *testing.T, chain string, spec ...string) iptables.Rule {
	line := "-A " + chain + " " + fakes.FormatRule(spec)
	r, ok := iptables.ParseRule(line)
	if !ok || !reflect.DeepEqual(r.Args(), spec) {
		t.Fatalf("%q parsed back as %q", line, r.Args())
	}
	return r
}
