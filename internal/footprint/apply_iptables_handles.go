package footprint

import "fmt"

// applyByHandle deletes what of one table's deletions the IPTables can
// delete by nf_tables handle (HandleDeleter), notes what it removed, and
// returns the changes left for iptables-restore: those it did not find
// exactly as listed, and every rule to add back. A deletion nf_tables no
// longer has is neither removed nor left.
//
// Its error is not the cleanup's: every change it could not settle is
// left, and applying those the usual way reports their own failures; the
// error is kept for when that fails too.
func applyByHandle(f *iptView, table string, changes []iptChange, rep *report) ([]iptChange, error) {
	hd, ok := f.ipt.(HandleDeleter)
	if !ok || len(changes) == 0 {
		return changes, nil
	}
	var items, rest []iptChange
	for _, c := range changes {
		if c.add {
			rest = append(rest, c)
		} else {
			items = append(items, c)
		}
	}
	var rules []ListedRule
	var chains []string
	var ruleItems, chainItems []int
	positions := map[*rule]int{}
	for i, d := range items {
		switch {
		case d.rule == nil:
			chains, chainItems = append(chains, d.chain), append(chainItems, i)
		case position(f, table, d.rule, positions) >= 0:
			rules, ruleItems = append(rules, ListedRule{Line: d.rule.line, Position: positions[d.rule]}), append(ruleItems, i)
		}
	}
	ruleOut, chainOut, err := hd.DeleteByHandle(table, rules, chains)
	settled := make([]bool, len(items))
	note := func(i int, o HandleOutcome) {
		if o == Deleted {
			rep.note(false, iptItem(f, items[i]))
		}
		settled[i] = o != NotDeleted
	}
	for k, o := range ruleOut {
		note(ruleItems[k], o)
	}
	for k, o := range chainOut {
		note(chainItems[k], o)
	}
	for i, d := range items {
		if !settled[i] {
			rest = append(rest, d)
		}
	}
	if err != nil {
		err = fmt.Errorf("%s: deleting by handle in %s: %w", f.name(), table, err)
	}
	return rest, err
}

// position returns r's index among the rules of its chain in the listing
// it came from, or -1; positions caches the chains it has indexed.
func position(f *iptView, table string, r *rule, positions map[*rule]int) int {
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
