package footprint

import (
	"fmt"
	"slices"
)

// applyByHandle deletes what of one table's changes (in iptOrder) the
// IPTables can delete by nf_tables handle (HandleDeleter), notes what it
// removed, and returns the changes left for iptables-restore: those it
// did not find exactly as listed, and every rule to add back. A deletion
// nf_tables no longer has is neither removed nor left.
//
// Its error is not the cleanup's: every change it could not settle is
// left, and applying those the usual way reports their own failures; the
// error is kept for when that fails too.
func applyByHandle(f *iptView, table string, changes []iptChange, rep *Report) ([]iptChange, error) {
	hd, ok := f.ipt.(HandleDeleter)
	if !ok || len(changes) == 0 {
		return changes, nil
	}
	k := slices.IndexFunc(changes, func(c iptChange) bool { return c.add }) // changes come in iptOrder: additions last
	if k < 0 {
		k = len(changes)
	}
	items, adds := changes[:k], changes[k:]
	rules, ruleItems := make([]ListedRule, 0, len(items)), make([]int, 0, len(items))
	var chains []string
	var chainItems []int
	for i, d := range items {
		switch {
		case d.rule == nil:
			chains, chainItems = append(chains, d.chain), append(chainItems, i)
		case position(f, table, d.rule) >= 0:
			rules, ruleItems = append(rules, ListedRule{Line: d.rule.line, Position: d.rule.pos}), append(ruleItems, i)
		}
	}
	ruleOut, chainOut, err := hd.DeleteByHandle(table, rules, chains)
	rep.grow(len(items))
	settled := make([]bool, len(items))
	note := func(i int, o HandleOutcome) {
		if o == Deleted {
			rep.note(false, items[i].att, iptEntry(f, items[i]))
		}
		settled[i] = o != NotDeleted
	}
	for k, o := range ruleOut {
		note(ruleItems[k], o)
	}
	for k, o := range chainOut {
		note(chainItems[k], o)
	}
	var rest []iptChange
	for i, d := range items {
		if !settled[i] {
			rest = append(rest, d)
		}
	}
	rest = append(rest, adds...)
	if err != nil {
		err = fmt.Errorf("%s: deleting by handle in %s: %w", f.name(), table, err)
	}
	return rest, err
}

// position returns r's index among the rules of its chain in the listing
// the view holds now, or -1 when r is not of that listing (it was read
// again since).
func position(f *iptView, table string, r *rule) int {
	rules, _ := f.rules(table, r.chain)
	if r.pos < len(rules) && &rules[r.pos] == r {
		return r.pos
	}
	return -1
}
