package footprint

import (
	"fmt"
	"net/netip"
	"slices"
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
// Chain hostip_hostports is kept (empty) for upgrades and scanned too. The
// comment is the bare container id, of whatever network: a rule is the
// attachment's only when its workload address is one this attachment
// provably held and nobody else holds now. The tables and chains are
// shared and never deleted.

var nftHostportTables = [2]NFTable{{Family: "ip", Name: "cni_hostport"}, {Family: "ip6", Name: "cni_hostport"}}

var nftHostportChains = map[string]bool{"hostports": true, "hostip_hostports": true, "masquerading": true}

// nftHostportAddr returns the workload address of one of portmap's
// per-attachment rules: the DNAT target, or the masqueraded destination.
func nftHostportAddr(r NFTRule) (netip.Addr, bool) {
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
func isHostportChain(table NFTable, chain string) bool {
	return (table == nftHostportTables[0] || table == nftHostportTables[1]) && nftHostportChains[chain]
}

// portmap's nftables DEL deletes every rule whose comment is the container
// id, in every chain it scans, whatever network wrote it: the DEL of id X
// on one network takes the port mappings of X's attachment on another
// network with it (and so does libcni's GC, which DELs stale cached
// attachments). The cleaner guards against that: before the DEL it
// remembers the hostport rules carrying the ids, after it adds back those
// the DEL removed whose address another attachment provably holds now.

// GuardHostports remembers the hostport rules whose comment is one of ids
// (nil: every hostport rule), before a DEL that may remove them. Only
// networks whose portmap uses nftables need it (Network.HostportNFT).
func (c *Cleaner) GuardHostports(ids []string) {
	if !c.net.HostportNFT || c.host.NFTables == nil {
		return
	}
	nft, err := c.host.NFTables()
	if err != nil {
		return // no nftables: nothing to guard
	}
	if ids != nil && !c.othersMayShareIDs(nft, newIDSet(ids)) {
		return
	}
	rules, err := nft.ListRules(c.ctx, nftHostportTables[:])
	if err != nil {
		c.fail(fmt.Errorf("nftables: listing %v before DEL: %w", nftHostportTables, err))
		return
	}
	set := newIDSet(ids)
	for _, r := range rules {
		if _, ok := nftHostportAddr(r); ok && (ids == nil || set[r.Comment]) {
			c.guarded = append(c.guarded, r)
		}
	}
}

// othersMayShareIDs reports whether a hostport rule carrying one of ids
// may belong to another attachment: only those need guarding. A rule
// that carries, in its own family, one of the addresses ids' files named
// before DEL is taken for theirs: another attachment's rule DNATs to and
// masquerades its own workload address, and an address is held by one
// attachment at a time. (It would take that rule naming ids' address as
// its host IP to be mistaken, and then only the guard is skipped: what a
// DEL removes, Clean never removes for it.) Without an NFTRuleMatcher it
// must assume so.
func (c *Cleaner) othersMayShareIDs(nft NFTables, ids idSet) bool {
	matcher, ok := nft.(NFTRuleMatcher)
	if !ok {
		return true
	}
	var own [2][]netip.Addr // by family, so that 4 bytes never match inside an IPv6 address
	for _, a := range c.prior.addrsOf(ids) {
		own[b2i(a.Is6())] = append(own[b2i(a.Is6())], a)
	}
	ownBytes := [2][][]byte{addrBytes(own[0]), addrBytes(own[1])}
	found, err := matcher.AnyRule(c.ctx, nftHostportTables[:], func(r NFTRuleSketch) bool {
		return ids[r.Comment] && isHostportChain(r.Table, r.Chain) &&
			!(nlRule{rawExpression: r.Raw}).mentions(ownBytes[b2i(r.Table == nftHostportTables[1])])
	})
	return found || err != nil
}

// restoreHostports adds back the guarded rules that are gone although
// their address is held by an attachment other than ids.
func (c *Cleaner) restoreHostports(ids idSet, evs [2]*evidence) {
	if len(c.guarded) == 0 || c.nft.nft == nil {
		return
	}
	var back []NFTRule
	for _, r := range c.guarded {
		addr, _ := nftHostportAddr(r)
		if !slices.ContainsFunc(c.nft.rules, func(now NFTRule) bool { return sameRule(now, r) }) &&
			c.heldByAnother(ids, evs[b2i(addr.Is6())], addr) {
			back = append(back, r)
		}
	}
	if len(back) == 0 {
		return
	}
	if err := c.nft.nft.AddRules(c.ctx, back); err != nil {
		c.fail(fmt.Errorf("nftables: adding back %d rule(s) of other attachments that DEL removed: %w", len(back), err))
		return
	}
	for _, r := range back {
		c.restored = append(c.restored, Item{Kind: KindNFTRule, ID: r.Comment, Detail: "nftables rule " + r.String()})
	}
}

// heldByAnother reports whether an attachment other than ids provably
// holds addr now, and none of ids does.
func (c *Cleaner) heldByAnother(ids idSet, ev *evidence, addr netip.Addr) bool {
	if f := c.families[b2i(addr.Is6())]; f != nil {
		f.completeEvidence(ids, ev)
	}
	if ev.proven[addr] != "" {
		return false
	}
	return ev.others[addr] || heldByOther(c.net.IPAMDirs, addr, ids)
}

// Restored returns the other attachments' rules a Clean added back after
// the DEL had removed them.
func (c *Cleaner) Restored() []Item { return append([]Item(nil), c.restored...) }

// KeepGuarded narrows what GuardHostports remembered to the rules of ids:
// a GC guards every hostport rule before libcni's GC runs, then keeps only
// those of the attachments that GC actually DEL'd, so that it never adds
// back what a concurrent Teardown of another id removed on purpose.
func (c *Cleaner) KeepGuarded(ids []string) {
	set := newIDSet(ids)
	c.guarded = slices.DeleteFunc(c.guarded, func(r NFTRule) bool { return !set[r.Comment] })
}
