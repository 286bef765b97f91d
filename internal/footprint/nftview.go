package footprint

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/hostwork"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// KindNFTRule is an nftables rule removed by a run.
const KindNFTRule Kind = "nftables rule"

// nftReader is a footprint whose plugin writes nftables rules: it names
// the tables and chains the views read for it, and how one in-kernel
// look over every footprint's tables tells its rules apart, so that no
// view names a plugin's.
type nftReader interface {
	// nftRead returns the tables a run lists for it (nftTables) and the
	// chains of them it reads.
	nftRead() (tables []host.NFTable, chains []string)
	// ownNFTRule returns the test of a rule of its carrying one of the
	// set's comments (ownRuleTest).
	ownNFTRule(v *view, set attSet) nftRuleTest
	// otherNFTRule returns the test of a rule of its that is not the
	// set's and may name another attachment's address
	// (othersMayMention).
	otherNFTRule(v *view, set attSet) nftRuleTest
	// ownNFTComments returns every comment a rule passing ownNFTRule may
	// carry: a search by comment in its chains (nftView.find) then finds
	// every rule of the set's own.
	ownNFTComments(v *view, set attSet) []string
}

// nftRuleTest tests a rule by its table, chain and comment.
type nftRuleTest func(table host.NFTable, chain, comment string) bool

// nftTables are the tables the plugins' nftables backends write, in the
// order of footprints. Every backend is always looked at, whatever the
// conflist names, so an operator who switched backends is not stranded
// with the old rules.
var nftTables = nftTablesRead()

func nftTablesRead() []host.NFTable {
	var out []host.NFTable
	for _, fp := range footprints {
		if r, ok := fp.(nftReader); ok {
			tables, _ := r.nftRead()
			out = append(out, tables...)
		}
	}
	return out
}

// nftChainsRead are the chains of the plugins' tables the footprints
// read (nftRead): every rule ownNFTRule passes is in one of them. Set by
// init, once every footprint's names are.
var nftChainsRead []host.NFTChain

// ownNFTComments returns the comments of the set's own rules, as every
// nftables footprint tells them (nftReader.ownNFTComments).
func ownNFTComments(v *view, set attSet) []string {
	var out []string
	for _, fp := range footprints {
		if r, ok := fp.(nftReader); ok {
			out = append(out, r.ownNFTComments(v, set)...)
		}
	}
	return out
}

// anyNFTRule returns the test that passes a rule when one nftables
// footprint's test (as test returns it) does, asked in the order of
// footprints.
func anyNFTRule(v *view, set attSet, test func(nftReader, *view, attSet) nftRuleTest) nftRuleTest {
	var tests []nftRuleTest
	for _, fp := range footprints {
		if r, ok := fp.(nftReader); ok {
			tests = append(tests, test(r, v, set))
		}
	}
	return func(table host.NFTable, chain, comment string) bool {
		for _, t := range tests {
			if t(table, chain, comment) {
				return true
			}
		}
		return false
	}
}

// nftView is the plugins' nftables tables as one run reads them: listed
// at most once, and by a Teardown only when an in-kernel look
// (NFTRuleMatcher) finds something that may concern it.
type nftView struct {
	ctx    context.Context
	errs   *errList
	nft    host.NFTables // nil: the host has no nftables
	broken bool          // nftables is there but could not be opened: nothing is judged on it
	meter  *hostwork.Meter

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
	// keepSeen: the look before the DEL fills seen (Cleaner.RecheckByHandle),
	// so it reads every footprint's chains, not only portmap's.
	keepSeen bool
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
		end := s.meter.Begin(hostwork.List, "nftables tables", false)
		rules, err := list(s.ctx, nftTables)
		end(len(rules), 0)
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
		end := s.meter.Begin(hostwork.Probe, "nftables scan of the plugins' tables", false)
		found, err := matcher.AnyRule(s.ctx, nftTables, match)
		end(0, 0)
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

// find returns the rules of chains carrying one of comments, read in the
// kernel chain by chain where the NFTables can (NFTRuleFinder): the other
// chains of the tables, and the expressions of rules with other
// comments, are never read. ok is false when it cannot or the search
// failed: the caller then scans the tables (any).
func (s *nftView) find(chains []host.NFTChain, comments []string) (rules []host.NFTRuleSketch, ok bool) {
	finder, can := s.nft.(host.NFTRuleFinder)
	if !can {
		return nil, false
	}
	end := s.meter.Begin(hostwork.Probe, "nftables search by comment", false)
	rules, err := finder.FindRules(s.ctx, chains, comments)
	end(0, 0)
	return rules, err == nil
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
// comments, as an nftables footprint tells its own (ownNFTRule). One
// in-kernel look answers every nftables footprint; after a DEL, the rules
// a look before it saw are looked up by handle instead (seenRules), when
// the NFTables can.
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
// comments, in any nftables footprint's tables.
func ownRuleTest(v *view, set attSet) nftRuleTest {
	return anyNFTRule(v, set, nftReader.ownNFTRule)
}

// othersMayMention reports whether a rule that is not the set's may name
// one of addrs: another attachment's, as an nftables footprint tells them
// (otherNFTRule). One in-kernel look answers every nftables footprint.
func othersMayMention(v *view, set attSet, addrs []netip.Addr) bool {
	if v.whole {
		return true
	}
	others, mentions := anyNFTRule(v, set, nftReader.otherNFTRule), mentionsAny(addrs)
	key := "others"
	for _, a := range addrs {
		key += " " + a.String()
	}
	return v.nft.anyOnce(key, func(r host.NFTRuleSketch) bool {
		return others(r.Table, r.Chain, r.Comment) && mentions(r)
	}, func(r host.NFTRule) bool { return true })
}

// mentionsAny is an NFTRuleSketch test for rules about one of addrs.
func mentionsAny(addrs []netip.Addr) func(host.NFTRuleSketch) bool {
	raw := nfnetlink.AddrBytes(addrs)
	return func(r host.NFTRuleSketch) bool { return (nfnetlink.Rule{Expr: r.Raw}).Mentions(raw) }
}

// The plugins' family, table and chain names: every listing shares one
// copy of each. The chains read are collected here, not in a variable's
// initializer: an interface method's variables are not known to be its
// dependencies, and may not be set yet there.
func init() {
	for _, fp := range footprints {
		if r, ok := fp.(nftReader); ok {
			tables, chains := r.nftRead()
			for _, t := range tables {
				nftables.ShareNames(t.Family, t.Name)
				for _, c := range chains {
					nftChainsRead = append(nftChainsRead, host.NFTChain{Table: t, Name: c})
				}
			}
			nftables.ShareNames(chains...)
		}
	}
}
