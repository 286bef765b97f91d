package footprint

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

// handleIPT is an IPTables with a HandleDeleter whose outcomes a test
// sets (of the rules by line, of the chains by name), and a Restorer that
// records what is left to it.
type handleIPT struct {
	lines         map[string][]string // chain: its -S listing
	ruleOutcomes  map[string]host.HandleOutcome
	chainOutcomes map[string]host.HandleOutcome
	err           error
	asked         []host.ListedRule
	askedChains   []string
	restored      []string
}

func (h *handleIPT) List(_, chain string) ([]string, error)   { return h.lines[chain], nil }
func (h *handleIPT) Delete(string, string, ...string) error   { return errors.New("not expected") }
func (h *handleIPT) ClearAndDeleteChain(string, string) error { return errors.New("not expected") }
func (h *handleIPT) RestoreNoFlush(_ string, lines []string) error {
	h.restored = append(h.restored, lines...)
	return nil
}
func (h *handleIPT) DeleteByHandle(_ string, rules []host.ListedRule, chains []string) ([]host.HandleOutcome, []host.HandleOutcome, error) {
	h.asked, h.askedChains = append(h.asked, rules...), append(h.askedChains, chains...)
	ruleOut, chainOut := make([]host.HandleOutcome, len(rules)), make([]host.HandleOutcome, len(chains))
	for i, r := range rules {
		ruleOut[i] = h.ruleOutcomes[r.Line]
	}
	for i, ch := range chains {
		chainOut[i] = h.chainOutcomes[ch]
	}
	return ruleOut, chainOut, h.err
}

func TestApplyDeletesByHandleWhatMatchedAndLeavesOnlyTheRestToIPTablesRestore(t *testing.T) {
	const (
		jumpA = `-A POSTROUTING -s 198.18.0.5/32 -m comment --comment "a" -j CNI-a`
		other = `-A POSTROUTING -s 198.18.0.6/32 -m comment --comment "x" -j CNI-x`
		jumpB = `-A POSTROUTING -s 198.18.0.7/32 -m comment --comment "b" -j CNI-b`
	)
	for _, tc := range []struct {
		name         string
		rules, chain []host.HandleOutcome
		err          error
		wantChains   []string // asked to delete by handle
		wantRestored []string
		wantRemoved  []string
	}{
		{
			name:  "what matched goes by handle; what did not, and the chain it jumps to, by iptables-restore",
			rules: []host.HandleOutcome{host.Deleted, host.NotDeleted}, chain: []host.HandleOutcome{host.Deleted, host.NotDeleted},
			wantChains:   []string{"CNI-a"}, // b's jump stays for now: its chain is not asked about
			wantRestored: []string{`-D POSTROUTING -s 198.18.0.7/32 -m comment --comment "b" -j CNI-b`, "-F CNI-b", "-X CNI-b"},
			wantRemoved:  []string{"nat rule " + jumpA, "nat chain CNI-a", "nat rule " + jumpB, "nat chain CNI-b"},
		},
		{
			name:  "what nf_tables no longer has is neither reported removed nor deleted another way",
			rules: []host.HandleOutcome{host.AlreadyGone, host.Deleted}, chain: []host.HandleOutcome{host.AlreadyGone, host.Deleted},
			wantChains:  []string{"CNI-a", "CNI-b"},
			wantRemoved: []string{"nat rule " + jumpB, "nat chain CNI-b"},
		},
		{
			name:  "after an error, what it did not settle goes by iptables-restore",
			rules: []host.HandleOutcome{host.Deleted, host.NotDeleted}, chain: []host.HandleOutcome{host.NotDeleted, host.NotDeleted}, err: nfnetlink.ErrGenerationChanged,
			wantChains:   []string{"CNI-a"},
			wantRestored: []string{`-D POSTROUTING -s 198.18.0.7/32 -m comment --comment "b" -j CNI-b`, "-F CNI-a", "-X CNI-a", "-F CNI-b", "-X CNI-b"},
			wantRemoved:  []string{"nat rule " + jumpA, "nat rule " + jumpB, "nat chain CNI-a", "nat chain CNI-b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipt := &handleIPT{lines: map[string][]string{"POSTROUTING": {"-P POSTROUTING ACCEPT", jumpA, other, jumpB}},
				ruleOutcomes: map[string]host.HandleOutcome{jumpA: tc.rules[0], jumpB: tc.rules[1]}, chainOutcomes: map[string]host.HandleOutcome{"CNI-a": tc.chain[0], "CNI-b": tc.chain[1]}, err: tc.err}
			errs, rep := &errList{}, &Report{}
			f := &iptView{ipt: ipt, errs: errs}
			rules, _ := f.rules("nat", "POSTROUTING")
			a, b := Attachment{"n", "a"}, Attachment{"n", "b"}
			applyIPT(f, []iptChange{
				{table: natTable, att: rep.attIndex(a), chain: "CNI-a"}, {table: natTable, att: rep.attIndex(b), chain: "CNI-b"},
				{table: natTable, att: rep.attIndex(a), rule: &rules[0]}, {table: natTable, att: rep.attIndex(b), rule: &rules[2]},
			}, errs, rep)
			if want := []host.ListedRule{{Line: jumpA, Position: 0, ChainLen: 3}, {Line: jumpB, Position: 2, ChainLen: 3}}; !slices.Equal(ipt.asked, want) || !slices.Equal(ipt.askedChains, tc.wantChains) {
				t.Errorf("asked to delete %v and chains %v; want %v (positions in the chain) and %v", ipt.asked, ipt.askedChains, want, tc.wantChains)
			}
			if !slices.Equal(ipt.restored, tc.wantRestored) {
				t.Errorf("iptables-restore got %q; want %q", ipt.restored, tc.wantRestored)
			}
			var removed []string
			for _, it := range rep.Removed() {
				removed = append(removed, strings.TrimPrefix(it.Detail, "iptables "))
			}
			if !slices.Equal(removed, tc.wantRemoved) {
				t.Errorf("removed %q; want %q", removed, tc.wantRemoved)
			}
			if err := errs.err(); err != nil {
				t.Errorf("cleanup failed: %v", err)
			}
		})
	}
}

// countingHandles is a HandleDeleter of one chain that deletes the rules
// and chains it is asked about (but the rule listed at notThere, which it
// does not find, and the one at gone, already gone), and counts how many
// it was handed at once. A rule is found at its position in the chain as
// it is now, so it counts the rules asked about at another position.
type countingHandles struct {
	handleIPT
	notThere, alreadyGone int
	calls, most, moved    int
	gone                  []int // listed positions no longer in the chain
}

func (c *countingHandles) DeleteByHandle(_ string, rules []host.ListedRule, chains []string) ([]host.HandleOutcome, []host.HandleOutcome, error) {
	c.calls++
	c.most = max(c.most, len(rules))
	ruleOut, chainOut := make([]host.HandleOutcome, len(rules)), make([]host.HandleOutcome, len(chains))
	for i, r := range rules {
		listed := listedPosition(c.lines["POSTROUTING"], r.Line)
		before := 0
		for _, g := range c.gone {
			if g < listed {
				before++
			}
		}
		if r.Position != listed-before {
			c.moved++
		}
		switch listed {
		case c.notThere:
			ruleOut[i] = host.NotDeleted
		case c.alreadyGone:
			ruleOut[i] = host.AlreadyGone
		default:
			ruleOut[i] = host.Deleted
		}
	}
	for i, r := range rules {
		if ruleOut[i] != host.NotDeleted {
			c.gone = append(c.gone, listedPosition(c.lines["POSTROUTING"], r.Line))
		}
	}
	for i := range chainOut {
		chainOut[i] = host.Deleted
	}
	return ruleOut, chainOut, nil
}

// A sweep's rules are handed over in chunks, so that matching them holds
// little; every one is deleted all the same.
func TestApplyHandsRulesToTheHandleDeleterInChunks(t *testing.T) {
	n := iptDeleteChunk + 7
	listing := []string{"-P POSTROUTING ACCEPT"}
	for i := range n {
		listing = append(listing, fmt.Sprintf("-A POSTROUTING -s 198.18.%d.%d/32 -j ACCEPT", i/250, 2+i%250))
	}
	ipt := &countingHandles{handleIPT: handleIPT{lines: map[string][]string{"POSTROUTING": listing}}, notThere: 5, alreadyGone: 9}
	errs, rep := &errList{}, &Report{}
	f := &iptView{ipt: ipt, errs: errs}
	rules, _ := f.rules("nat", "POSTROUTING")
	changes := []iptChange{{table: natTable, att: rep.attIndex(Attachment{"n", "a"}), chain: "CNI-a"}}
	for i := range rules {
		changes = append(changes, iptChange{table: natTable, rule: &rules[i]})
	}
	applyIPT(f, changes, errs, rep)
	// The rule not found goes by iptables-restore; the one already gone is
	// not reported.
	if ipt.calls != 3 || ipt.most != iptDeleteChunk || rep.Len() != n || len(ipt.restored) != 1 {
		t.Errorf("%d calls, at most %d rules at once, %d removed, %d lines restored; want 3 calls (2 of rules, 1 of the chain), at most %d, %d removed, 1 restored",
			ipt.calls, ipt.most, rep.Len(), len(ipt.restored), iptDeleteChunk, n)
	}
	if ipt.moved > 0 {
		t.Errorf("%d rules were asked about at another position than theirs, once the rules before them were deleted", ipt.moved)
	}
	if err := errs.err(); err != nil {
		t.Error(err)
	}
}

// listedPosition returns the index of line among the rules of a listing
// (its -P line is not a rule).
func listedPosition(listing []string, line string) int {
	return slices.Index(listing, line) - 1
}
