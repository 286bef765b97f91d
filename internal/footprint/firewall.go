package footprint

import (
	"net/netip"

	"github.com/seed1280861d/cninet/internal/iptables"
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
// rules look exactly the same): the DEL is handed only the addresses the
// attachment provably still owns (prevent), and the rules of the others
// are the force cleanup's.

type firewallIPT struct{}

const firewallChain = "CNI-FORWARD"

// The views read CNI-FORWARD, rule by rule, in every run; a drift check
// also reads FORWARD for its jump to it (iptReader). The plugin names no
// chain after an attachment.
func (firewallIPT) sharedChains() []tableChain { return []tableChain{{"filter", firewallChain}} }
func (firewallIPT) checkedChains() []tableChain {
	return []tableChain{{"filter", "FORWARD"}, {"filter", firewallChain}}
}
func (firewallIPT) chainPrefixes() []string { return nil }
func (firewallIPT) perFamily()              {}

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

// prevent withholds from the DEL every cached address the set does not
// provably still own (prevent.go): on a network with host-local IPAM one
// not reserved for the attachment, and any that another attachment holds
// now. For an address reserved for the attachment that costs a read of
// the other networks' reservation files and nothing else: its
// reservation keeps it from anybody else of its network until the DEL is
// over (see contested).
func (firewallIPT) prevent(v *view, set attSet, pv *prevention) {
	type candidate struct {
		cache cachedResult
		addr  netip.Addr
	}
	var candidates []candidate
	var ask []netip.Addr
	reserved := v.prior.reserved()
	for _, c := range v.prior.cached {
		n := v.nets[c.net]
		if !set[c.att()] || !n.runs("firewall") {
			continue
		}
		for _, a := range c.addrs {
			if len(n.IPAMDirs) > 0 && !reserved[reservedAddr{c.att(), a}] {
				pv.withholdAddr(c, a)
				continue
			}
			candidates = append(candidates, candidate{c, a})
			ask = append(ask, a)
		}
	}
	if len(ask) == 0 {
		return
	}
	ev := newEvidence()
	askHolders(v, set, ev, ask)
	for _, c := range candidates {
		if len(ev.held[c.addr]) > 0 {
			pv.withholdAddr(c.cache, c.addr)
		}
	}
}

// firewallRule is one of the firewall plugin's rules and its address.
type firewallRule struct {
	rule *iptables.Rule
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
func firewallRuleAddr(r iptables.Rule) (netip.Addr, bool) {
	if r.Chain != firewallChain {
		return netip.Addr{}, false
	}
	var prefix string
	switch s := r.Args(); {
	case len(s) == 8 && s[0] == "-d" && s[2] == "-m" && s[3] == "conntrack" && s[4] == "--ctstate" &&
		s[5] == "RELATED,ESTABLISHED" && s[6] == "-j" && s[7] == "ACCEPT":
		prefix = s[1]
	case len(s) == 4 && s[0] == "-s" && s[2] == "-j" && s[3] == "ACCEPT":
		prefix = s[1]
	default:
		return netip.Addr{}, false
	}
	return iptables.HostAddr(prefix)
}

func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	return uniqueAddrs(out)
}

// firewallConf is what of the firewall plugin's configuration names its
// chains.
type firewallConf struct {
	Backend    string `json:"backend"`
	AdminChain string `json:"iptablesAdminChainName"`
}

// expect: for each family the result has addresses of, FORWARD's jump to
// CNI-FORWARD, CNI-FORWARD's jump to the admin chain, and per address the
// two ACCEPT rules, as the plugin's iptables backend writes them. Its
// own ADD restores them: it creates what is missing and adds a rule only
// when it is not there (both releases).
func (firewallIPT) expect(v *liveView, a *Live, h *Health) {
	if v.firewallUnchanged {
		return // nothing to compare: skip building what is wanted
	}
	confs := configs[firewallConf](a.Net, "firewall")
	if len(confs) == 0 || (confs[0].Backend != "" && confs[0].Backend != "iptables") {
		return // firewalld's backend keeps its state in firewalld
	}
	admin := orDefault(confs[0].AdminChain, "CNI-ADMIN")
	for _, v6 := range []bool{false, true} {
		addrs := a.addrs(v6)
		if len(addrs) == 0 {
			continue
		}
		expectChains(v, v6, "firewall", ByPlugin, h, "filter", firewallChain, admin)
		want := []wantRule{
			rule("filter", "FORWARD", "jump to "+firewallChain, "-m", "comment", "--comment", "CNI firewall plugin rules", "-j", firewallChain).atHead(),
			rule("filter", firewallChain, "jump to "+admin, "-m", "comment", "--comment", "CNI firewall plugin admin overrides", "-j", admin).atHead(),
		}
		for _, p := range addrs {
			ip := p.Addr().String()
			want = append(want,
				rule("filter", firewallChain, "accept replies to "+ip, "-d", ip, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"),
				rule("filter", firewallChain, "accept from "+ip, "-s", ip, "-j", "ACCEPT"))
		}
		expectRules(v, v6, "firewall", ByPlugin, h, want...)
	}
}
