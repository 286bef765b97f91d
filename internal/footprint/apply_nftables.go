package footprint

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/hostwork"
)

// applyNFT applies the nftables changes: each table's deletions in one
// transaction (when a concurrent change makes it fail, say a handle
// already gone, rule by rule). Only what was really removed is reported.
func applyNFT(s *nftView, changes []nftChange, rep *Report) {
	// In place, by table: a sweep plans tens of thousands of deletions,
	// and its plan is not read again.
	slices.SortStableFunc(changes, func(a, b nftChange) int {
		return cmp.Or(strings.Compare(a.rule.Family, b.rule.Family), strings.Compare(a.rule.Table, b.rule.Table))
	})
	deletions := changes
	for len(deletions) > 0 {
		t := host.NFTable{Family: deletions[0].rule.Family, Name: deletions[0].rule.Table}
		n := slices.IndexFunc(deletions, func(c nftChange) bool { return c.rule.Family != t.Family || c.rule.Table != t.Name })
		if n < 0 {
			n = len(deletions)
		}
		deleteNFT(s, t, deletions[:n], rep)
		deletions = deletions[n:]
	}
}

func deleteNFT(s *nftView, t host.NFTable, changes []nftChange, rep *Report) {
	if hd, ok := s.nft.(host.NFTHandleDeleter); ok { // exact outcomes per rule
		for chunk := range slices.Chunk(changes, nftDeleteChunk) {
			deleteNFTByHandle(s, hd, t, chunk, rep)
		}
		return
	}
	end := s.meter.Begin(hostwork.Write, "nftables deletion in "+t.String(), false)
	err := s.nft.DeleteRules(s.ctx, t, rulesOf(changes))
	end(0, 0)
	if err == nil {
		for _, c := range changes {
			rep.noteAt(c.att, nftEntry(c))
		}
		return
	}
	for _, c := range changes {
		end := s.meter.Begin(hostwork.Write, "nftables deletion in "+t.String(), false)
		err := s.nft.DeleteRules(s.ctx, t, []host.NFTRule{*c.rule})
		end(0, 0)
		if err != nil {
			if !isNFTNotFound(err) {
				s.errs.add(fmt.Errorf("nftables: deleting %s: %w", c.rule, err))
			}
			continue
		}
		rep.noteAt(c.att, nftEntry(c))
	}
}

// nftDeleteChunk is how many rules are handed to an NFTHandleDeleter at
// once. It batches them itself, but dumps each chain they are in per
// call: the chunks bound the copies a sweep of tens of thousands makes
// (and what it holds to match them), at a few dumps more.
const nftDeleteChunk = 16384

func deleteNFTByHandle(s *nftView, hd host.NFTHandleDeleter, t host.NFTable, changes []nftChange, rep *Report) {
	end := s.meter.Begin(hostwork.Write, "nftables deletion by handle in "+t.String(), false)
	out, err := hd.DeleteByHandle(s.ctx, t, rulesOf(changes))
	end(0, 0)
	for i, o := range out {
		if o == host.Deleted {
			rep.noteAt(changes[i].att, nftEntry(changes[i]))
		}
	}
	if err != nil {
		s.errs.add(fmt.Errorf("nftables: deleting from %s: %w", t, err))
	}
}

// rulesOf returns the changes' rules, as NFTables takes them.
func rulesOf(changes []nftChange) []host.NFTRule {
	rules := make([]host.NFTRule, len(changes))
	for i, c := range changes {
		rules[i] = *c.rule
	}
	return rules
}

func nftEntry(c nftChange) entry { return entry{nft: c.rule, shape: shapeNFTRule} }

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
