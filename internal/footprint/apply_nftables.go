package footprint

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// applyNFT applies the nftables changes: each table's deletions in one
// transaction (when a concurrent change makes it fail, say a handle
// already gone, rule by rule), then the guarded rules added back in one.
// Only what was really removed is reported.
func applyNFT(s *nftView, changes []nftChange, rep *Report) {
	byTable := map[NFTable][]nftChange{}
	var adds []nftChange
	for _, c := range changes {
		if c.add {
			adds = append(adds, c)
			continue
		}
		t := NFTable{c.rule.Family, c.rule.Table}
		byTable[t] = append(byTable[t], c)
	}
	tables := make([]NFTable, 0, len(byTable))
	for t := range byTable {
		tables = append(tables, t)
	}
	sort.Slice(tables, func(i, j int) bool { return tables[i].String() < tables[j].String() })
	for _, t := range tables {
		deleteNFT(s, t, byTable[t], rep)
	}
	if len(adds) == 0 {
		return
	}
	if err := s.nft.AddRules(s.ctx, rulesOf(adds)); err != nil {
		s.errs.add(fmt.Errorf("nftables: adding back %d rule(s) of other attachments that a DEL removed: %w", len(adds), err))
		return
	}
	for _, c := range adds {
		rep.note(true, c.att, nftEntry(c))
	}
}

func deleteNFT(s *nftView, t NFTable, changes []nftChange, rep *Report) {
	if hd, ok := s.nft.(NFTHandleDeleter); ok { // exact outcomes per rule
		for chunk := range slices.Chunk(changes, nftDeleteChunk) {
			deleteNFTByHandle(s, hd, t, chunk, rep)
		}
		return
	}
	if err := s.nft.DeleteRules(s.ctx, t, rulesOf(changes)); err == nil {
		for _, c := range changes {
			rep.note(false, c.att, nftEntry(c))
		}
		return
	}
	for _, c := range changes {
		if err := s.nft.DeleteRules(s.ctx, t, []NFTRule{*c.rule}); err != nil {
			if !isNFTNotFound(err) {
				s.errs.add(fmt.Errorf("nftables: deleting %s: %w", c.rule, err))
			}
			continue
		}
		rep.note(false, c.att, nftEntry(c))
	}
}

// nftDeleteChunk is how many rules are handed to an NFTHandleDeleter at
// once. It batches them itself, but dumps each chain they are in per
// call: the chunks bound the copies a sweep of tens of thousands makes,
// at a few dumps more.
const nftDeleteChunk = 16384

func deleteNFTByHandle(s *nftView, hd NFTHandleDeleter, t NFTable, changes []nftChange, rep *Report) {
	out, err := hd.DeleteByHandle(s.ctx, t, rulesOf(changes))
	rep.grow(len(out))
	for i, o := range out {
		if o == Deleted {
			rep.note(false, changes[i].att, nftEntry(changes[i]))
		}
	}
	if err != nil {
		s.errs.add(fmt.Errorf("nftables: deleting from %s: %w", t, err))
	}
}

// rulesOf returns the changes' rules, as NFTables takes them.
func rulesOf(changes []nftChange) []NFTRule {
	rules := make([]NFTRule, len(changes))
	for i, c := range changes {
		rules[i] = *c.rule
	}
	return rules
}

func nftEntry(c nftChange) entry { return entry{detail: c.rule.String(), shape: shapeNFTRule} }

// isNFTNotFound reports nft's answer for a rule, chain or table that is
// already gone.
func isNFTNotFound(err error) bool {
	var nf interface{ IsNotFound() bool }
	return (errors.As(err, &nf) && nf.IsNotFound()) || containsAny(err.Error(), "No such file or directory", "not found")
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
