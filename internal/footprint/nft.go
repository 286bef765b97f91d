package footprint

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
)

// KindNFTRule is an nftables rule removed by a Cleaner.
const KindNFTRule Kind = "nftables rule"

// nftScan is the plugins' nftables rules during one cleaner run, listed
// once: both backends are always looked at, whatever the conflist names,
// so an operator who switched backends is not stranded with the old rules.
type nftScan struct {
	nft   NFTables // nil: no nftables on this host, or its listing failed
	rules []NFTRule

	// deferred says a Teardown's in-process look found nothing of its
	// ids, so the tables were not listed; they are only if evidence is
	// ever needed.
	deferred bool
	once     sync.Once
}

var nftTables = []NFTable{nftMasqTable, nftHostportTables[0], nftHostportTables[1]}

// scanNFT lists the masquerade and hostport tables, once per run. A
// Teardown first looks for its own rules in-process (NFTRuleMatcher) and
// lists nothing when no rule carries a comment of ids and no rule was
// guarded.
func (c *Cleaner) scanNFT(ids idSet) *nftScan {
	if c.nft != nil {
		return c.nft
	}
	c.nft = &nftScan{nft: c.openNFT()}
	if c.nft.nft == nil {
		return c.nft
	}
	if !c.whole && len(c.guarded) == 0 && !c.mayOwnNFTRules(c.nft.nft, ids) {
		c.nft.deferred = true
		return c.nft
	}
	c.nft.list(c)
	return c.nft
}

// openNFT returns the host's nftables, nil when it has none.
func (c *Cleaner) openNFT() NFTables {
	if c.host.NFTables == nil {
		return nil
	}
	nft, err := c.host.NFTables()
	if errors.Is(err, ErrNFTablesMissing) {
		return nil // no nft, no nftables rules
	}
	if err != nil {
		c.fail(fmt.Errorf("nftables: %w", err))
		return nil
	}
	return nft
}

// list reads every rule of the tables.
func (s *nftScan) list(c *Cleaner) {
	rules, err := s.nft.ListRules(c.ctx, nftTables)
	if err != nil {
		c.fail(fmt.Errorf("nftables: listing %v: %w", nftTables, err))
		s.nft = nil // nothing listed: nothing is deleted blind
		return
	}
	s.rules = rules
}

// mayOwnNFTRules reports whether a rule of the tables carries one of ids'
// comments: a masquerade comment of the network, or a bare id in a
// hostport chain. Without an NFTRuleMatcher it must assume so.
func (c *Cleaner) mayOwnNFTRules(nft NFTables, ids idSet) bool {
	matcher, ok := nft.(NFTRuleMatcher)
	if !ok {
		return true
	}
	masq := c.masqIndex(ids)
	found, err := matcher.AnyRule(c.ctx, nftTables, func(r NFTRuleSketch) bool {
		_, isMasq := masq[r.Comment]
		return (isMasq && r.Table == nftMasqTable && r.Chain == nftMasqChain) ||
			(ids[r.Comment] && isHostportChain(r.Table, r.Chain))
	})
	return found || err != nil
}

// proveDeferred adds what the rules say to ev of one family, listing the
// tables now if the scan deferred it; it reports whether it added
// anything. A Teardown calls it before it judges a rule on ev.
func (c *Cleaner) proveDeferred(ids idSet, ev *evidence, v6 bool) bool {
	s := c.nft
	if s == nil || !s.deferred {
		return false
	}
	s.once.Do(func() { s.list(c) })
	s.prove(c, ids, ev, v6)
	return len(s.rules) > 0
}

// masqIndex maps each of ids' masquerade comments, under every interface
// name the network's attachments may have, to its id.
func (c *Cleaner) masqIndex(ids idSet) map[string]string {
	ifNames := c.net.ifNames()
	index := make(map[string]string, len(ids)*len(ifNames))
	for id := range ids {
		for _, ifName := range ifNames {
			index[(Attachment{c.net.Name, id}).NFTMasqComment(ifName)] = id
		}
	}
	return index
}

// prove adds what the rules of one family say to ev: the addresses ids'
// masquerade rules name are theirs; the addresses other attachments'
// masquerade and hostport rules name are held by others.
func (s *nftScan) prove(c *Cleaner, ids idSet, ev *evidence, v6 bool) {
	index := c.masqIndex(ids)
	for _, r := range s.rules {
		switch addr, isHostport := nftHostportAddr(r); {
		case isNFTMasq(r) && r.Saddr.IsValid() && r.Saddr.Is6() == v6:
			if id, ok := index[r.Comment]; ok {
				ev.proven[r.Saddr] = id
			} else {
				ev.others[r.Saddr] = true
			}
		case isHostport && addr.Is6() == v6 && !ids[r.Comment]:
			ev.others[addr] = true
		}
	}
}

// plan returns, per table, the rules of ids: masquerade rules by their
// comment, hostport rules by their bare-id comment and an owned address.
func (s *nftScan) plan(c *Cleaner, ids idSet, evs [2]*evidence) map[NFTable][]NFTRule {
	index := c.masqIndex(ids)
	plan := map[NFTable][]NFTRule{}
	var candidates []NFTRule
	for _, r := range s.rules {
		if _, ok := index[r.Comment]; ok && isNFTMasq(r) {
			plan[nftMasqTable] = append(plan[nftMasqTable], r)
		} else if _, ok := nftHostportAddr(r); ok && ids[r.Comment] {
			candidates = append(candidates, r)
		}
	}
	if len(candidates) == 0 {
		return plan
	}
	var owned [2]map[netip.Addr]string
	for i, ev := range evs {
		owned[i] = ev.owned(c.net.IPAMDirs, ids)
		if f := c.families[i]; f != nil && len(owned[i]) > 0 {
			owned[i] = f.completeEvidence(ids, ev)
		}
	}
	for _, r := range candidates {
		if addr, _ := nftHostportAddr(r); owned[b2i(addr.Is6())][addr] == r.Comment {
			t := NFTable{r.Family, r.Table}
			plan[t] = append(plan[t], r)
		}
	}
	return plan
}

// apply deletes each table's rules in one transaction; when a concurrent
// change makes one fail (a handle already gone), rule by rule.
func (s *nftScan) apply(c *Cleaner, ids idSet, plan map[NFTable][]NFTRule) {
	index := c.masqIndex(ids)
	tables := make([]NFTable, 0, len(plan))
	for t := range plan {
		tables = append(tables, t)
	}
	sort.Slice(tables, func(i, j int) bool { return tables[i].String() < tables[j].String() })
	for _, t := range tables {
		rules := plan[t]
		if s.applyByHandle(c, t, rules, index) { // exact outcomes per rule
			continue
		}
		if err := s.nft.DeleteRules(c.ctx, t, rules); err == nil {
			for _, r := range rules {
				c.noteRemoved(KindNFTRule, nftOwner(index, r), "nftables rule "+r.String())
			}
			continue
		}
		for _, r := range rules {
			if err := s.nft.DeleteRules(c.ctx, t, []NFTRule{r}); err != nil && !isNFTNotFound(err) {
				c.fail(fmt.Errorf("nftables: deleting %s: %w", r, err))
				continue
			}
			c.noteRemoved(KindNFTRule, nftOwner(index, r), "nftables rule "+r.String())
		}
	}
}

// nftOwner is the id a planned rule was deleted for: the one whose
// masquerade comment it carries (a cut comment no longer spells the id
// out), else the bare id of a hostport rule.
func nftOwner(masqIndex map[string]string, r NFTRule) string {
	if id, ok := masqIndex[r.Comment]; ok && isNFTMasq(r) {
		return id
	}
	return r.Comment
}

// discover returns the ids the network's masquerade comments name.
// portmap's comments name no network, so they prove nothing here.
func (s *nftScan) discover(c *Cleaner) []string {
	var ids []string
	for _, r := range s.rules {
		if isNFTMasq(r) {
			if id, ok := nftMasqCommentID(c.net.Name, c.net.ifNames(), r.Comment); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// isNFTNotFound reports nft's answer for a rule, chain or table that is
// already gone.
func isNFTNotFound(err error) bool {
	var nf interface{ IsNotFound() bool }
	return (errors.As(err, &nf) && nf.IsNotFound()) || containsAny(err.Error(), "No such file or directory", "not found")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
