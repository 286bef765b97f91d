package footprint

import (
	"fmt"
	"net/netip"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

// portmap with "backend": "nftables" writes, per attachment, in tables
// ip cni_hostport and ip6 cni_hostport (one per address family the
// attachment has):
//
//	chain hostports:    tcp dport <host port> dnat to <ip>:<port>      comment "ID"
//	                    (with ip[6] daddr <host ip> in front for a host IP)
//	chain masquerading: ip saddr <ip> ip daddr <ip> masquerade        comment "ID"
//	                    ip saddr 127.0.0.1 ip daddr <ip> masquerade  comment "ID"
//
// Chain hostip_hostports is kept (empty) for upgrades and scanned too.
// The comment is the bare container id, of whatever network: a rule is an
// attachment's only when its workload address is one the attachment
// provably held and nobody else holds now. The tables and chains are
// shared and never deleted.
//
// Its DEL deletes every rule whose comment is the container id, in every
// chain, whatever network wrote it: the DEL of id X on one network would
// take the port mappings of X's attachment on another network with it.
// So where such rules are there, portmap is left out of the DEL (prevent)
// and the force cleanup removes the attachment's own rules by address.

type portmapNFT struct{}

// configure notes whether the network's portmap uses nftables.
func (portmapNFT) configure(n *Network) {
	type backendConf struct {
		Backend string `json:"backend"`
	}
	for _, conf := range configs[backendConf](*n, "portmap") {
		n.HostportNFT = n.HostportNFT || conf.Backend == "nftables"
	}
}

var nftHostportTables = [2]host.NFTable{{Family: "ip", Name: "cni_hostport"}, {Family: "ip6", Name: "cni_hostport"}}

var nftHostportChains = map[string]bool{"hostports": true, "hostip_hostports": true, "masquerading": true}

// nftHostportChainsRead are the chains portmap's DEL deletes from, in
// both families whatever the attachment's addresses.
var nftHostportChainsRead = func() []host.NFTChain {
	var out []host.NFTChain
	for _, t := range nftHostportTables {
		for _, c := range sortedKeys(nftHostportChains) {
			out = append(out, host.NFTChain{Table: t, Name: c})
		}
	}
	return out
}()

// nftHostportAddr returns the workload address of one of portmap's
// per-attachment rules: the DNAT target, or the masqueraded destination.
func nftHostportAddr(r host.NFTRule) (netip.Addr, bool) {
	if r.Table != nftHostportTables[0].Name || (r.Family != "ip" && r.Family != "ip6") || !nftHostportChains[r.Chain] {
		return netip.Addr{}, false
	}
	switch {
	case r.DNAT.IsValid():
		return r.DNAT, true
	case r.Chain == "masquerading" && r.Daddr.IsValid():
		return r.Daddr, true
	}
	return netip.Addr{}, false
}

// isHostportChain reports whether chain of table is one of portmap's.
func isHostportChain(table host.NFTable, chain string) bool {
	return (table == nftHostportTables[0] || table == nftHostportTables[1]) && nftHostportChains[chain]
}

// The views list both hostport tables and read the hostport chains
// (nftReader).
func (portmapNFT) nftRead() ([]host.NFTable, []string) {
	return []host.NFTable{nftHostportTables[0], nftHostportTables[1]}, sortedKeys(nftHostportChains)
}

// ownNFTRule: a rule of a hostport chain carrying one of the set's ids.
func (portmapNFT) ownNFTRule(_ *view, set attSet) nftRuleTest {
	ids := set.ids()
	return func(table host.NFTable, chain, comment string) bool {
		return ids[comment] && isHostportChain(table, chain)
	}
}

// otherNFTRule: a rule of a hostport chain carrying none of the set's
// ids.
func (portmapNFT) otherNFTRule(_ *view, set attSet) nftRuleTest {
	ids := set.ids()
	return func(table host.NFTable, chain, comment string) bool {
		return isHostportChain(table, chain) && !ids[comment]
	}
}

// ownNFTComments: the set's ids.
func (portmapNFT) ownNFTComments(_ *view, set attSet) []string { return sortedKeys(set.ids()) }

func (portmapNFT) prove(*view, attSet) []claim { return nil }
func (portmapNFT) discover(*view, attSet)      {} // a bare id names no network: it proves nothing

// holders: a hostport rule of an id outside the set holds its address.
func (portmapNFT) holders(v *view, set attSet, addrs addrSet) []claim {
	addrs = contested(v, set, addrs)
	if len(addrs) == 0 || !othersMayMention(v, set, addrs.all()) {
		return nil
	}
	ids := set.ids()
	var out []claim
	for _, r := range v.nft.list() {
		if addr, ok := nftHostportAddr(r); ok && !ids[r.Comment] && addrs[addr] {
			out = append(out, claim{addr, Attachment{ID: r.Comment}})
		}
	}
	return out
}

// contest returns the owned addresses that rules carrying the set's ids
// map ports to.
func (portmapNFT) contest(v *view, set attSet, own map[netip.Addr]Attachment) []netip.Addr {
	var out []netip.Addr
	for _, r := range idRules(v, set) {
		if addr, _ := nftHostportAddr(*r); own[addr].ID == r.Comment {
			out = append(out, addr)
		}
	}
	return out
}

func (portmapNFT) plan(v *view, set attSet, ev *evidence, p *plan) {
	for _, r := range idRules(v, set) {
		addr, _ := nftHostportAddr(*r)
		if a, ok := ev.owner(addr); ok && ev.asked[addr] && a.ID == r.Comment {
			p.deleteNFTRule(a, r)
		}
	}
}

// prevent leaves portmap out of the DEL chain when rules of the set's ids
// carry none of the set's addresses: another attachment of the same id
// (on another network) wrote them, and portmap's DEL would take them.
// The force cleanup then removes exactly the set's own, by address.
func (portmapNFT) prevent(v *view, set attSet, pv *prevention) {
	if len(foreignIDRules(v, set)) > 0 {
		pv.omitPlugin("portmap")
	}
}

// idRules returns the hostport rules carrying one of the set's ids, in
// the view's listing.
func idRules(v *view, set attSet) []*host.NFTRule {
	if !ownMayBeThere(v, set) {
		return nil
	}
	ids := set.ids()
	var out []*host.NFTRule
	rules := v.nft.list()
	for i := range rules {
		if _, ok := nftHostportAddr(rules[i]); ok && ids[rules[i].Comment] {
			out = append(out, &rules[i])
		}
	}
	return out
}

// foreignIDRules returns the hostport rules carrying one of the set's ids
// (of a network whose portmap uses nftables) but none of the addresses
// the set's files named before the DEL.
func foreignIDRules(v *view, set attSet) []host.NFTRule {
	if v.wholeWorkload {
		return nil // the ids' other attachments are going too: nothing to keep
	}
	ids := idSet{}
	for a := range set {
		if v.nets[a.Network].HostportNFT {
			ids[a.ID] = true
		}
	}
	if len(ids) == 0 || !v.nft.available() {
		return nil
	}
	own := newAddrSet(v.prior.addrsOf(set))
	var ownBytes [2][][]byte // by family, so that 4 bytes never match inside an IPv6 address
	for i, v6 := range []bool{false, true} {
		ownBytes[i] = nfnetlink.AddrBytes(own.list(v6))
	}
	seen := newSeenRules(v, set) // a complete look sees every rule of the set's own
	foreign := func(r host.NFTRuleSketch) bool {
		return ids[r.Comment] && isHostportChain(r.Table, r.Chain) &&
			!(nfnetlink.Rule{Expr: r.Raw}).Mentions(ownBytes[b2i(r.Table == nftHostportTables[1])])
	}
	// portmap's DEL looks in both families whatever the attachment's
	// addresses, so both tables' hostport chains are searched; for seen,
	// every chain of the set's own rules, with all their comments.
	chains, comments := nftHostportChainsRead, sortedKeys(ids)
	if v.nft.keepSeen {
		chains, comments = nftChainsRead, ownNFTComments(v, set)
	}
	var found, inKernel bool
	if rules, ok := v.nft.find(chains, comments); ok {
		inKernel = v.nft.keepSeen // seen holds all of the set's own only then
		for _, r := range rules {
			seen.note(r)
			found = found || foreign(r)
		}
	} else {
		found, inKernel = v.nft.any(func(r host.NFTRuleSketch) bool {
			seen.note(r)
			return foreign(r)
		}, func(r host.NFTRule) bool { return ids[r.Comment] })
	}
	if !found {
		if inKernel {
			v.nft.seen = seen
		}
		return nil
	}
	var out []host.NFTRule
	for _, r := range v.nft.list() {
		if addr, ok := nftHostportAddr(r); ok && ids[r.Comment] && !own[addr] {
			out = append(out, r)
		}
	}
	return out
}

// expect: for each family the workload has an address of, the table's
// entry chains jumping to hostports_all and it to the two hostport
// chains, and per mapping the DNAT rule (and with snat the masquerade
// rules) carrying the container id, as forwardPorts writes them.
// portmap's ADD adds its rules without looking for them, so a repair
// first deletes what is left of the attachment's own, then runs it
// (Health.ownHostportRules).
func (portmapNFT) expect(v *liveView, a *Live, h *Health) {
	if v.firewallUnchanged {
		return // nothing to compare: skip building what is wanted
	}
	conf, ok := portmapOf(a)
	if !ok || len(conf.given) == 0 || a.backend("portmap") != "nftables" {
		return
	}
	if _, err := v.nftRules(); err != nil {
		h.unknown(err)
		return
	}
	for i, v6 := range []bool{false, true} {
		addr, ok := a.sandboxAddr(v6)
		if !ok {
			continue
		}
		table := nftHostportTables[i]
		in := func(chain string, match func(host.NFTRule) bool, comments ...string) bool {
			return countNFT(v.nftChain(table, chain, comments...), match) > 0
		}
		miss := func(chain, what string) {
			h.miss(Missing{Plugin: "portmap", Kind: KindNFTRule, Backend: "nftables", Detail: table.String() + " " + chain + ": " + what, Restore: ByPlugin})
		}
		jumps := func(target string) func(host.NFTRule) bool {
			return func(r host.NFTRule) bool { return r.Verdict == "jump" && r.Target == target }
		}
		// Releases since 1.9 enter through hostports_all; earlier ones
		// (1.6.1 to 1.8) jump from prerouting and output to the two
		// hostport chains themselves. Either layout is whole.
		direct := func(entry string) bool { return in(entry, jumps("hostip_hostports")) && in(entry, jumps("hostports")) }
		viaAll := false
		for _, entry := range []string{"prerouting", "output"} {
			switch {
			case in(entry, jumps("hostports_all")):
				viaAll = true
			case !direct(entry):
				miss(entry, "jump hostports_all")
			}
		}
		for _, target := range []string{"hostip_hostports", "hostports"} {
			if viaAll && !in("hostports_all", jumps(target)) {
				miss("hostports_all", "jump "+target)
			}
		}
		ip := addr.Addr()
		for _, m := range conf.mappings(v6) {
			hostIP, _ := netip.ParseAddr(m.HostIP)
			if hostIP.IsUnspecified() {
				hostIP = netip.Addr{}
			}
			what := fmt.Sprintf("%s dport %d dnat to %s (comment %q)", m.Protocol, m.HostPort, netip.AddrPortFrom(ip, uint16(m.ContainerPort)), a.ID)
			if hostIP.IsValid() {
				what = "daddr " + hostIP.String() + " " + what
			}
			dnat := func(r host.NFTRule) bool { // a host IP's in hostip_hostports, before 1.9
				return r.DNAT == ip && int(r.DNATPort) == m.ContainerPort && int(r.DPort) == m.HostPort && r.Daddr == hostIP && r.L4Proto == m.Protocol
			}
			if !in("hostports", dnat, a.ID) && !(hostIP.IsValid() && in("hostip_hostports", dnat, a.ID)) {
				miss("hostports", what)
			}
		}
		if !*conf.SNAT {
			continue
		}
		sources := []netip.Addr{ip}
		if !v6 {
			sources = append(sources, netip.MustParseAddr("127.0.0.1"))
		}
		for _, src := range sources {
			if !in("masquerading", func(r host.NFTRule) bool { return r.Saddr == src && r.Daddr == ip }, a.ID) {
				miss("masquerading", fmt.Sprintf("saddr %s daddr %s masquerade (comment %q)", src, ip, a.ID))
			}
		}
	}
}

// ownHostportRules returns what is left of a's own hostport rules: those
// carrying its id whose workload address is one of its own. A repair
// deletes them before portmap's ADD writes them all again. A rule of the
// same id on another network names another address: it is left alone.
func ownHostportRules(rules []host.NFTRule, a *Live) []host.NFTRule {
	own := map[netip.Addr]bool{}
	for _, p := range a.allAddrs() {
		own[p.Addr()] = true
	}
	var out []host.NFTRule
	for _, r := range rules {
		if addr, ok := nftHostportAddr(r); ok && r.Comment == a.ID && own[addr] {
			out = append(out, r)
		}
	}
	return out
}
