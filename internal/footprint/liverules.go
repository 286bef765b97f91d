package footprint

import (
	"net/netip"
	"strings"

	"github.com/seed1280861d/cninet/internal/iptables"
)

// wantRule is an iptables rule a plugin writes, as a drift check looks
// for it in a listing: the options it was written with. iptables lists a
// rule in its own words (an address gets its prefix length, a subnet its
// network address, a protocol match its -m), so a listed rule matches
// when it carries every option given, with addresses compared as
// prefixes, whatever else iptables added.
type wantRule struct {
	table, chain string
	opts         [][2]string // option and value; "!-d" for a negated -d; value "" for a flag alone
	name         string      // how a person knows it
}

// optionAliases are the long options iptables lists by their short
// name (a rule written with --destination-ports is listed with --dports).
var optionAliases = map[string]string{
	"--source": "-s", "--destination": "-d", "--protocol": "-p", "--jump": "-j", "--goto": "-g", "--match": "-m",
	"--in-interface": "-i", "--out-interface": "-o", "--destination-ports": "--dports", "--source-ports": "--sports",
	"--destination-port": "--dport", "--source-port": "--sport",
}

// canonical is opt as iptables lists it ("!" kept in front).
func canonical(opt string) string {
	name, neg := strings.CutPrefix(opt, "!")
	if short, ok := optionAliases[name]; ok {
		name = short
	}
	if neg {
		return "!" + name
	}
	return name
}

// rule starts a wantRule of chain in table, named name, with opts as
// pairs ("-s", "10.0.0.2", "-j", "ACCEPT"); "!" before an option negates
// it.
func rule(table, chain, name string, opts ...string) wantRule {
	w := wantRule{table: table, chain: chain, name: name}
	for i := 0; i < len(opts); i++ {
		opt := opts[i]
		if opt == "!" && i+1 < len(opts) {
			i++
			opt = "!" + opts[i]
		}
		val := ""
		if i+1 < len(opts) && !strings.HasPrefix(opts[i+1], "-") && opts[i+1] != "!" {
			i++
			val = opts[i]
		}
		w.opts = append(w.opts, [2]string{canonical(opt), val})
	}
	return w
}

// in reports whether one of rules is w.
func (w wantRule) in(rules []iptables.Rule) bool {
	for _, r := range rules {
		if w.matches(r) {
			return true
		}
	}
	return false
}

// matches reports whether r carries every option of w.
func (w wantRule) matches(r iptables.Rule) bool {
	if r.Chain != w.chain {
		return false
	}
	have := ruleOptions(r)
	for _, o := range w.opts {
		found := false
		for _, h := range have[o[0]] {
			if sameValue(o[0], o[1], h) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ruleOptions splits a listed rule into its options and their values;
// "!" is joined to the option it negates.
func ruleOptions(r iptables.Rule) map[string][]string {
	args := r.Args()
	out := map[string][]string{}
	for i := 0; i < len(args); i++ {
		opt := args[i]
		if opt == "!" && i+1 < len(args) {
			i++
			opt = "!" + args[i]
		}
		if !strings.HasPrefix(opt, "-") && !strings.HasPrefix(opt, "!-") {
			continue
		}
		val := ""
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && args[i+1] != "!" {
			i++
			val = args[i]
		}
		out[canonical(opt)] = append(out[canonical(opt)], val)
	}
	return out
}

// sameValue compares a wanted option value with a listed one: addresses
// as prefixes (iptables lists "10.0.0.2" as "10.0.0.2/32" and
// "10.0.0.2/24" as "10.0.0.0/24"), a comment as iptables stores it (cut
// at 255 bytes), anything else byte for byte.
func sameValue(opt, want, have string) bool {
	switch strings.TrimPrefix(opt, "!") {
	case "-s", "-d", "--source", "--destination":
		w, ok1 := asPrefix(want)
		h, ok2 := asPrefix(have)
		return ok1 && ok2 && w == h
	case "--comment":
		return iptables.StoredComment(want) == have || want == have
	}
	return want == have
}

// asPrefix reads an address or a prefix as iptables stores it: the
// network of the prefix, a bare address as a host prefix.
func asPrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), true
	}
	return netip.Prefix{}, false
}

// expectRules adds to h each of want that family v6's listing lacks, as a
// piece of plugin's footprint restored by restore; a chain that is not
// there is reported once, with every rule it should hold.
func expectRules(v *liveView, v6 bool, plugin string, restore Restore, h *Health, want ...wantRule) {
	t, err := v.tables(v6)
	if err != nil {
		h.unknown(err)
		return
	}
	for _, w := range want {
		rules, exists, err := t.chain(w.table, w.chain)
		if err != nil {
			h.unknown(err)
			continue
		}
		if !exists || !w.in(rules) {
			h.miss(Missing{Plugin: plugin, Kind: KindRule, Backend: familyName(v6), Detail: w.table + " " + w.chain + ": " + w.name, Restore: restore})
		}
	}
}

// expectChains adds to h each of chains of table that family v6 lacks.
func expectChains(v *liveView, v6 bool, plugin string, restore Restore, h *Health, table string, chains ...string) {
	t, err := v.tables(v6)
	if err != nil {
		h.unknown(err)
		return
	}
	for _, ch := range chains {
		_, exists, err := t.chain(table, ch)
		if err != nil {
			h.unknown(err)
			continue
		}
		if !exists {
			h.miss(Missing{Plugin: plugin, Kind: KindChain, Backend: familyName(v6), Detail: table + " " + ch, Restore: restore})
		}
	}
}
