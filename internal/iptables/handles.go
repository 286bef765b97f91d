package iptables

import (
	"net/netip"
	"strings"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

// DeleteByHandle implements HandleDeleter.
func (h *nfIPTables) DeleteByHandle(table string, rules []host.ListedRule, chains []string) ([]host.HandleOutcome, []host.HandleOutcome, error) {
	ruleOut, chainOut := make([]host.HandleOutcome, len(rules)), make([]host.HandleOutcome, len(chains))
	if err := h.sameBinary(); err != nil {
		return ruleOut, chainOut, err
	}
	targets := make([]nfnetlink.Target, 0, len(rules))
	of := make([]int, 0, len(rules)) // targets[k] is rules[of[k]]
	for i, lr := range rules {
		if t, ok := iptablesTarget(lr); ok {
			targets, of = append(targets, t), append(of, i)
		}
	}
	if len(targets) > 0 {
		out, err := nfnetlink.DeleteRules(h.family, table, targets)
		for k, o := range out {
			ruleOut[of[k]] = o
		}
		if err != nil {
			return ruleOut, chainOut, err
		}
	}
	kept := map[string]bool{} // chains a rule that stays may jump to
	for i, lr := range rules {
		if ruleOut[i] == host.NotDeleted {
			if r, ok := ParseRule(lr.Line); ok {
				kept[r.Target()] = true
			}
		}
	}
	var free []string
	var freeOf []int
	for i, ch := range chains {
		if !kept[ch] {
			free, freeOf = append(free, ch), append(freeOf, i)
		}
	}
	if len(free) == 0 {
		return ruleOut, chainOut, nil
	}
	out, err := nfnetlink.DeleteChains(h.family, table, free)
	for k, o := range out {
		chainOut[freeOf[k]] = o
	}
	return ruleOut, chainOut, err
}

// iptablesTarget is what a listed rule must look like in nf_tables to be
// taken for it: at its position, with its comment (iptables-nft keeps it
// in the rule's user data), and carrying each address it names (masked to
// its prefix, as nf_tables compares it) and the name of the chain or
// extension it jumps to. ok is false for a line it cannot read.
func iptablesTarget(lr host.ListedRule) (nfnetlink.Target, bool) {
	r, ok := ParseRule(lr.Line)
	if !ok || lr.Position < 0 {
		return nfnetlink.Target{}, false
	}
	t := nfnetlink.Target{Chain: r.Chain, Pos: lr.Position, ChainLen: lr.ChainLen, Comment: r.Comment, XtComment: true}
	spec := r.Args()
	for i := 0; i+1 < len(spec); i++ {
		switch spec[i] {
		case "-s", "--source", "-d", "--destination", "--to-destination", "--to-source", "--to":
			needle, ok := addrNeedle(spec[i+1])
			if !ok {
				return nfnetlink.Target{}, false
			}
			if len(needle) > 0 { // a /0 compares nothing
				t.Needles = append(t.Needles, needle)
			}
		}
	}
	switch r.Target() {
	case "", "ACCEPT", "DROP", "RETURN", "QUEUE":
		// verdicts are numbers in nf_tables, not names
	default:
		t.Needles = append(t.Needles, []byte(r.Target()))
	}
	return t, true
}

// addrNeedle returns the bytes an address argument leaves in a rule's
// expressions: "a/len" (nf_tables compares the prefix's whole bytes),
// "a", "a:port", "[a]:port" or a range "a-b" (its first address).
func addrNeedle(arg string) ([]byte, bool) {
	if p, err := netip.ParsePrefix(arg); err == nil {
		return p.Masked().Addr().AsSlice()[:(p.Bits()+7)/8], true
	}
	host := arg
	if i := strings.IndexByte(host, '-'); i >= 0 {
		host = host[:i]
	}
	if ap, err := netip.ParseAddrPort(host); err == nil {
		return ap.Addr().Unmap().AsSlice(), true
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Count(host, ":") == 1 {
		host = host[:i] // "a:port" with a port range
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return nil, false
	}
	return a.Unmap().AsSlice(), true
}
