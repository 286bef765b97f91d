package footprint

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// KindNFTRule is an nftables rule removed by a Cleaner.
const KindNFTRule Kind = "nftables rule"

// nftScan is the plugins' nftables rules during one cleaner run, listed
// once: both backends are always looked at, whatever the conflist names,
// so an operator who switched backends is not stranded with the old rules.
type nftScan struct {
	nft   NFTables // nil: no nftables on this host
	rules []NFTRule
}

// scanNFT lists the masquerade and hostport tables, once per run.
func (c *Cleaner) scanNFT() *nftScan {
	if c.nft != nil {
		return c.nft
	}
	c.nft = &nftScan{}
	if c.host.NFTables == nil {
		return c.nft
	}
	nft, err := c.host.NFTables()
	if errors.Is(err, ErrNFTablesMissing) {
		return c.nft // no nft, no nftables rules
	}
	if err != nil {
		c.fail(fmt.Errorf("nftables: %w", err))
		return c.nft
	}
	tables := []NFTable{nftMasqTable, nftHostportTables[0], nftHostportTables[1]}
	rules, err := nft.ListRules(c.ctx, tables)
	if err != nil {
		c.fail(fmt.Errorf("nftables: listing %v: %w", tables, err))
		return c.nft // nothing listed: nothing is deleted blind
	}
	c.nft.nft, c.nft.rules = nft, rules
	return c.nft
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
