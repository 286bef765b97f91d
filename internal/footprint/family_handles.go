package footprint

import "fmt"

// applyByHandle deletes what of one table's items the IPTables can delete
// by nf_tables handle (HandleDeleter), notes what it removed, and returns
// the items left for iptables-restore: those it did not find exactly as
// listed. An item nf_tables no longer has is neither removed nor left.
//
// Its error is not the cleanup's: every item it could not settle is left,
// and deleting those the usual way reports their own failures; the error
// is kept for when that fails too.
func (f *family) applyByHandle(table string, items []deletion) ([]deletion, error) {
	hd, ok := f.ipt.(HandleDeleter)
	if !ok || len(items) == 0 {
		return items, nil
	}
	var rules []ListedRule
	var chains []string
	var ruleItems, chainItems []int
	positions := map[*rule]int{}
	for i, d := range items {
		switch {
		case d.rule == nil:
			chains, chainItems = append(chains, d.chain), append(chainItems, i)
		case f.position(table, d.rule, positions) >= 0:
			rules, ruleItems = append(rules, ListedRule{Line: d.rule.line, Position: positions[d.rule]}), append(ruleItems, i)
		}
	}
	ruleOut, chainOut, err := hd.DeleteByHandle(table, rules, chains)
	settled := make([]bool, len(items))
	note := func(i int, o HandleOutcome) {
		if o == Deleted {
			f.noteRemoved(items[i])
		}
		settled[i] = o != NotDeleted
	}
	for k, o := range ruleOut {
		note(ruleItems[k], o)
	}
	for k, o := range chainOut {
		note(chainItems[k], o)
	}
	var rest []deletion
	for i, d := range items {
		if !settled[i] {
			rest = append(rest, d)
		}
	}
	if err != nil {
		err = fmt.Errorf("%s: deleting by handle in %s: %w", familyName(f.v6), table, err)
	}
	return rest, err
}

// position returns r's index among the rules of its chain in the listing
// it came from, or -1; positions caches the chains it has indexed.
func (f *family) position(table string, r *rule, positions map[*rule]int) int {
	if p, ok := positions[r]; ok {
		return p
	}
	rules, _ := f.rules(table, r.chain)
	for i := range rules {
		positions[&rules[i]] = i
	}
	if p, ok := positions[r]; ok {
		return p
	}
	positions[r] = -1
	return -1
}
