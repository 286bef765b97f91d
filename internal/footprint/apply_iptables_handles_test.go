package footprint

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// handleIPT is an IPTables with a HandleDeleter whose outcomes a test
// sets, and a Restorer that records what is left to it.
type handleIPT struct {
	lines         map[string][]string // chain: its -S listing
	ruleOutcomes  []HandleOutcome
	chainOutcomes []HandleOutcome
	err           error
	asked         []ListedRule
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
func (h *handleIPT) DeleteByHandle(_ string, rules []ListedRule, chains []string) ([]HandleOutcome, []HandleOutcome, error) {
	h.asked, h.askedChains = rules, chains
	return h.ruleOutcomes, h.chainOutcomes, h.err
}

func TestApplyDeletesByHandleWhatMatchedAndLeavesOnlyTheRestToIPTablesRestore(t *testing.T) {
	const (
		jumpA = `-A POSTROUTING -s 198.18.0.5/32 -m comment --comment "a" -j CNI-a`
		other = `-A POSTROUTING -s 198.18.0.6/32 -m comment --comment "x" -j CNI-x`
		jumpB = `-A POSTROUTING -s 198.18.0.7/32 -m comment --comment "b" -j CNI-b`
	)
	for _, tc := range []struct {
		name         string
		rules, chain []HandleOutcome
		err          error
		wantRestored []string
		wantRemoved  []string
	}{
		{
			name:  "what matched goes by handle; what did not, and the chain it jumps to, by iptables-restore",
			rules: []HandleOutcome{Deleted, NotDeleted}, chain: []HandleOutcome{Deleted, NotDeleted},
			wantRestored: []string{`-D POSTROUTING -s 198.18.0.7/32 -m comment --comment "b" -j CNI-b`, "-F CNI-b", "-X CNI-b"},
			wantRemoved:  []string{"nat rule " + jumpA, "nat chain CNI-a", "nat rule " + jumpB, "nat chain CNI-b"},
		},
		{
			name:  "what nf_tables no longer has is neither reported removed nor deleted another way",
			rules: []HandleOutcome{AlreadyGone, Deleted}, chain: []HandleOutcome{AlreadyGone, Deleted},
			wantRemoved: []string{"nat rule " + jumpB, "nat chain CNI-b"},
		},
		{
			name:  "after an error, what it did not settle goes by iptables-restore",
			rules: []HandleOutcome{Deleted, NotDeleted}, chain: []HandleOutcome{NotDeleted, NotDeleted}, err: errGenerationChanged,
			wantRestored: []string{`-D POSTROUTING -s 198.18.0.7/32 -m comment --comment "b" -j CNI-b`, "-F CNI-a", "-X CNI-a", "-F CNI-b", "-X CNI-b"},
			wantRemoved:  []string{"nat rule " + jumpA, "nat rule " + jumpB, "nat chain CNI-a", "nat chain CNI-b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipt := &handleIPT{lines: map[string][]string{"POSTROUTING": {"-P POSTROUTING ACCEPT", jumpA, other, jumpB}},
				ruleOutcomes: tc.rules, chainOutcomes: tc.chain, err: tc.err}
			errs, rep := &errList{}, &Report{}
			f := &iptView{ipt: ipt, errs: errs}
			rules, _ := f.rules("nat", "POSTROUTING")
			a, b := Attachment{"n", "a"}, Attachment{"n", "b"}
			applyIPT(f, []iptChange{
				{table: "nat", att: a, chain: "CNI-a"}, {table: "nat", att: b, chain: "CNI-b"},
				{table: "nat", att: a, rule: &rules[0]}, {table: "nat", att: b, rule: &rules[2]},
			}, errs, rep)
			if want := []ListedRule{{jumpA, 0}, {jumpB, 2}}; !slices.Equal(ipt.asked, want) || !slices.Equal(ipt.askedChains, []string{"CNI-a", "CNI-b"}) {
				t.Errorf("asked to delete %v and chains %v; want %v (positions in the chain) and CNI-a, CNI-b", ipt.asked, ipt.askedChains, want)
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
