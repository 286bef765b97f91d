package footprint

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// KindNFTRule is an nftables rule removed by a run.
const KindNFTRule Kind = "nftables rule"

// nftTables are the tables the plugins' nftables backends write. Both
// backends are always looked at, whatever the conflist names, so an
// operator who switched backends is not stranded with the old rules.
var nftTables = []host.NFTable{nftMasqTable, nftHostportTables[0], nftHostportTables[1]}

// nftView is the plugins' nftables tables as one run reads them: listed
// at most once, and by a Teardown only when an in-kernel look
// (NFTRuleMatcher) finds something that may concern it.
type nftView struct {
	ctx    context.Context
	errs   *errList
	nft    host.NFTables // nil: the host has no nftables
	broken bool          // nftables is there but could not be opened: nothing is judged on it

	once   sync.Once
	rules  []host.NFTRule
	listed bool // the listing succeeded
	brief  bool // list without Expr (NFTBriefLister): no rule will be judged by its expressions

	mu      sync.Mutex
	answers map[string]bool // what was asked in the kernel, by question

	// seen is what a complete in-kernel look before the DEL found of the
	// set's own rules (Cleaner.RecheckByHandle): a Prevent's view fills
	// it, a Clean's view is given it.
	seen *seenRules
}

// available reports whether the host has nftables to read.
func (s *nftView) available() bool { return s.nft != nil }

// list returns every rule of the plugins' tables, listed once; nil when
// the listing failed (recorded), so that nothing is deleted blind.
func (s *nftView) list() []host.NFTRule {
	if s.nft == nil {
		return nil
	}
	s.once.Do(func() {
		list := s.nft.ListRules
		if b, ok := s.nft.(host.NFTBriefLister); ok && s.brief {
			list = b.ListRulesBrief
		}
		rules, err := list(s.ctx, nftTables)
		if err != nil {
			s.errs.add(fmt.Errorf("nftables: listing %v: %w", nftTables, err))
			return
		}
		s.rules, s.listed = rules, true
	})
	return s.rules
}

// any reports whether a rule of the plugins' tables may match: asked in
// the kernel where the NFTables can (no process, no listing), else by
// listing. An error counts as "may". inKernel says the kernel answered:
// when found is false, match then saw every rule of the tables.
func (s *nftView) any(match func(host.NFTRuleSketch) bool, fallback func(host.NFTRule) bool) (found, inKernel bool) {
	if s.nft == nil {
		return false, false
	}
	if matcher, ok := s.nft.(host.NFTRuleMatcher); ok {
		found, err := matcher.AnyRule(s.ctx, nftTables, match)
		if err == nil {
			return found, true
		}
	}
	for _, r := range s.list() {
		if fallback(r) {
			return true, false
		}
	}
	return !s.listed, false
}

// anyOnce is any, asked once per run for each question key: several
// footprints ask the same question, and each answer costs a dump.
func (s *nftView) anyOnce(key string, match func(host.NFTRuleSketch) bool, fallback func(host.NFTRule) bool) bool {
	s.mu.Lock()
	answer, done := s.answers[key]
	s.mu.Unlock()
	if done {
		return answer
	}
	answer, _ = s.any(match, fallback)
	s.mu.Lock()
	if s.answers == nil {
		s.answers = map[string]bool{}
	}
	s.answers[key] = answer
	s.mu.Unlock()
	return answer
}

// ownMayBeThere reports whether a rule may carry one of the set's
// comments: a masquerade comment of its own, or its bare id in a hostport
// chain. One in-kernel look answers both nftables footprints; after a
// DEL, the rules a look before it saw are looked up by handle instead
// (seenRules), when the NFTables can.
func ownMayBeThere(v *view, set attSet) bool {
	if v.whole {
		return true
	}
	own := ownRuleTest(v, set)
	if gone, ok := v.nft.seenGone(set); ok {
		return !gone
	}
	return v.nft.anyOnce("own", func(r host.NFTRuleSketch) bool { return own(r.Table, r.Chain, r.Comment) },
		func(r host.NFTRule) bool {
			return own(host.NFTable{Family: r.Family, Name: r.Table}, r.Chain, r.Comment)
		})
}

// ownRuleTest returns the test of a rule carrying one of the set's
// comments.
func ownRuleTest(v *view, set attSet) func(table host.NFTable, chain, comment string) bool {
	index, ids := masqIndex(v, set), set.ids()
	return func(table host.NFTable, chain, comment string) bool {
		_, masq := index[comment]
		return (masq && table == nftMasqTable && chain == nftMasqChain) || (ids[comment] && isHostportChain(table, chain))
	}
}

// othersMayMention reports whether a rule that is not the set's may name
// one of addrs: another attachment's masquerade or hostport rule. One
// in-kernel look answers both nftables footprints.
func othersMayMention(v *view, set attSet, addrs []netip.Addr) bool {
	if v.whole {
		return true
	}
	index, ids, mentions := masqIndex(v, set), set.ids(), mentionsAny(addrs)
	key := "others"
	for _, a := range addrs {
		key += " " + a.String()
	}
	return v.nft.anyOnce(key, func(r host.NFTRuleSketch) bool {
		_, masq := index[r.Comment]
		return ((r.Table == nftMasqTable && !masq) || (isHostportChain(r.Table, r.Chain) && !ids[r.Comment])) && mentions(r)
	}, func(r host.NFTRule) bool { return true })
}

// mentionsAny is an NFTRuleSketch test for rules about one of addrs.
func mentionsAny(addrs []netip.Addr) func(host.NFTRuleSketch) bool {
	raw := nfnetlink.AddrBytes(addrs)
	return func(r host.NFTRuleSketch) bool { return (nfnetlink.Rule{Expr: r.Raw}).Mentions(raw) }
}

// The plugins' family, table and chain names: every listing shares one
// copy of each.
func init() {
	for _, t := range nftTables {
		nftables.ShareNames(t.Family, t.Name)
	}
	for chain := range nftHostportChains {
		nftables.ShareNames(chain)
	}
	nftables.ShareNames(nftMasqChain)
}
