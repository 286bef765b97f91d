package footprint

import (
	"net/netip"
	"slices"
)

// The firewall plugin (iptables backend) writes, per workload address, in
// table filter and without any comment:
//
//	-A CNI-FORWARD -d <ip>/<full> -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//	-A CNI-FORWARD -s <ip>/<full> -j ACCEPT
//
// Nothing in them names the network or the attachment: they are deleted
// only for an address the set provably held and nobody else holds now.
// Its DEL deletes by the addresses of the cached result, which may be
// stale (a reboot with IPAM on tmpfs hands them to new workloads, whose
// rules look exactly the same), so it is guarded: the rules of an address
// another attachment holds are recorded before the DEL and added back
// after it.

type firewallIPT struct{}

const firewallChain = "CNI-FORWARD"

func (firewallIPT) prove(*view, attSet) []claim            { return nil }
func (firewallIPT) holders(*view, attSet, addrSet) []claim { return nil }
func (firewallIPT) discover(*view, attSet)                 {}

// contest returns the owned addresses CNI-FORWARD has rules for: an
// AddrScanner rules most Teardowns out without listing the chain.
func (firewallIPT) contest(v *view, set attSet, own map[netip.Addr]Attachment) []netip.Addr {
	var out []netip.Addr
	for _, f := range v.families() {
		if !f.mayMention("filter", firewallChain, familyAddrs(sortedAddrs(own), f.v6), nil) {
			continue
		}
		for _, r := range firewallRules(f) {
			if _, ok := own[r.addr]; ok {
				out = append(out, r.addr)
			}
		}
	}
	return out
}

func (firewallIPT) plan(v *view, set attSet, ev *evidence, p *plan) {
	for _, f := range v.families() {
		if !ev.askedAny(f.v6) {
			continue // nothing of this family was contested: nothing to judge, nothing listed
		}
		rules := firewallRules(f)
		p.growIPT(f.v6, len(rules))
		for _, r := range rules {
			if a, ok := ev.owner(r.addr); ok && ev.asked[r.addr] {
				p.deleteRule(f.v6, a, "filter", r.rule)
			}
		}
	}
}

// guardAddrs returns the addresses the DEL will hand the firewall plugin
// (the cached results of the set's attachments whose network runs it)
// that CNI-FORWARD may have rules for.
func (firewallIPT) guardAddrs(v *view, set attSet) []netip.Addr {
	var out []netip.Addr
	for _, f := range v.families() {
		addrs := familyAddrs(delAddrs(v, set), f.v6)
		if f.mayMention("filter", firewallChain, addrs, nil) {
			out = append(out, addrs...)
		}
	}
	return out
}

// guard records the CNI-FORWARD rules of guarded addresses that an
// attachment outside the set holds.
func (firewallIPT) guard(v *view, set attSet, ev *evidence) []guarded {
	var out []guarded
	for _, f := range v.families() {
		addrs := newAddrSet(familyAddrs(delAddrs(v, set), f.v6))
		if !slices.ContainsFunc(addrs.all(), func(a netip.Addr) bool { return len(ev.held[a]) > 0 }) {
			continue
		}
		for _, r := range firewallRules(f) {
			if holders := ev.held[r.addr]; len(holders) > 0 && addrs[r.addr] {
				out = append(out, guarded{holders: holders, addr: r.addr, v6: f.v6, rule: r.rule})
			}
		}
	}
	return out
}

// restore adds back the guarded rules that are gone while a holder that
// lives still holds their address.
func (firewallIPT) restore(v *view, set attSet, ev *evidence, gs []guarded, live func(Attachment) bool, p *plan) {
	var now [2]map[string]bool // the lines of CNI-FORWARD, read once per family
	for _, g := range gs {
		f := v.ipt[b2i(g.v6)]
		if g.rule == nil || f == nil || f.listFailed() { // nothing to compare with: it may be there
			continue
		}
		holders := ev.heldBy(g.addr, "", live)
		if len(holders) == 0 {
			continue
		}
		if now[b2i(g.v6)] == nil {
			now[b2i(g.v6)] = map[string]bool{}
			for _, r := range firewallRules(f) {
				now[b2i(g.v6)][r.rule.line] = true
			}
		}
		if !now[b2i(g.v6)][g.rule.line] {
			now[b2i(g.v6)][g.rule.line] = true // once, whoever else guarded it
			p.addBackRule(g.v6, holders[0], "filter", g.rule)
		}
	}
}

// delAddrs returns the addresses the firewall plugin's DEL is handed: the
// cached results of the set's attachments whose network runs it.
func delAddrs(v *view, set attSet) []netip.Addr {
	withFirewall := attSet{}
	for a := range set {
		if v.nets[a.Network].runs("firewall") {
			withFirewall[a] = true
		}
	}
	return v.prior.cachedAddrsOf(withFirewall)
}

// firewallRule is one of the firewall plugin's rules and its address.
type firewallRule struct {
	rule *rule
	addr netip.Addr
}

// firewallRules returns the rules of CNI-FORWARD written exactly as the
// firewall plugin writes them for one workload address.
func firewallRules(f *iptView) []firewallRule {
	rules, _ := f.rules("filter", firewallChain)
	var out []firewallRule
	for i := range rules {
		if a, ok := firewallRuleAddr(rules[i]); ok {
			out = append(out, firewallRule{&rules[i], a})
		}
	}
	return out
}

// firewallRuleAddr returns the address of a rule exactly as the firewall
// plugin writes it for one workload address, and nothing else.
func firewallRuleAddr(r rule) (netip.Addr, bool) {
	if r.chain != firewallChain {
		return netip.Addr{}, false
	}
	var prefix string
	switch s := r.args(); {
	case len(s) == 8 && s[0] == "-d" && s[2] == "-m" && s[3] == "conntrack" && s[4] == "--ctstate" &&
		s[5] == "RELATED,ESTABLISHED" && s[6] == "-j" && s[7] == "ACCEPT":
		prefix = s[1]
	case len(s) == 4 && s[0] == "-s" && s[2] == "-j" && s[3] == "ACCEPT":
		prefix = s[1]
	default:
		return netip.Addr{}, false
	}
	return hostAddr(prefix)
}

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	return uniqueAddrs(out)
}
