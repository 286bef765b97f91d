package footprint

import (
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/hostwork"
)

// A Teardown reads the plugins' nftables tables twice: before the DEL,
// to keep portmap's DEL off rules of its id that are not its own
// (foreignIDRules), and after it, to find what the DEL left
// (ownMayBeThere). Where the NFTables keeps no copy of the tables (the
// default keeps one), each read is a dump of them, whose cost grows
// with every attachment on the host. When the first read finds nothing
// foreign it has seen every rule of the set's own; with
// Cleaner.RecheckByHandle, Prevent keeps their handles and Clean looks
// each one up (host.NFTRuleLookup) instead of reading the tables again.
// The ids' lock keeps cninet's writers out in between, and a DEL deletes
// rules, it never adds one. A rule written after the first read by a
// process outside the lock (a plugin's nft still running after its ADD
// was killed) is not looked for: only a Teardown or Disconnect of an
// attachment whose ADD returned sets RecheckByHandle, and a GC, which
// reads everything, finds what is left.

// seenRules is what one complete look before the DEL saw of a set's own
// rules: every masquerade rule with one of its comments and every
// hostport rule with one of its ids, by table, chain and handle.
type seenRules struct {
	set   attSet
	own   func(table host.NFTable, chain, comment string) bool
	rules []host.NFTRuleSketch // without Raw
	known map[seenKey]bool
	blind bool // a rule of its own came without a handle: nothing can be looked up
}

// seenKey is where a rule is: nf_tables numbers rules per table.
type seenKey struct {
	table  host.NFTable
	handle int
}

func newSeenRules(v *view, set attSet) *seenRules {
	return &seenRules{set: set, own: ownRuleTest(v, set), known: map[seenKey]bool{}}
}

// note keeps r if it is one of the set's own. A dump that a change
// interrupted is taken again: a rule it shows twice is kept once.
func (s *seenRules) note(r host.NFTRuleSketch) {
	if !s.own(r.Table, r.Chain, r.Comment) {
		return
	}
	if r.Handle <= 0 {
		s.blind = true
		return
	}
	r.Raw = nil
	if k := (seenKey{r.Table, r.Handle}); !s.known[k] {
		s.known[k] = true
		s.rules = append(s.rules, r)
	}
}

// of reports whether the rules were seen for exactly set, each with its
// handle.
func (s *seenRules) of(set attSet) bool {
	if s == nil || s.blind || len(s.set) != len(set) {
		return false
	}
	for a := range set {
		if !s.set[a] {
			return false
		}
	}
	return true
}

// seenGone reports whether every rule seen before the DEL is gone, each
// looked up by handle: one still there with its comment is not. ok is
// false when nothing was seen for set, the NFTables cannot look a rule
// up, or a lookup failed: the tables are then read as before. Asked once
// per view.
func (s *nftView) seenGone(set attSet) (gone, ok bool) {
	if s.nft == nil || !s.seen.of(set) {
		return false, false
	}
	lookup, can := s.nft.(host.NFTRuleLookup)
	if !can {
		return false, false
	}
	s.mu.Lock()
	answer, done := s.answers["seen gone"]
	s.mu.Unlock()
	if done {
		return answer, true
	}
	gone = true
	for _, r := range s.seen.rules {
		end := s.meter.Begin(hostwork.Probe, "nftables lookup by handle", false)
		got, found, err := lookup.LookupRule(s.ctx, r.Table, r.Chain, r.Handle)
		end(0, 0)
		if err != nil {
			return false, false
		}
		if found && got.Comment == r.Comment {
			gone = false
			break
		}
	}
	s.mu.Lock()
	if s.answers == nil {
		s.answers = map[string]bool{}
	}
	s.answers["seen gone"] = gone
	s.mu.Unlock()
	return gone, true
}
