package footprint

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// applyByHandle deletes what of one table's changes (in iptOrder) the
// IPTables can delete by nf_tables handle (HandleDeleter), notes what it
// removed, and returns the changes left for iptables-restore: those it
// did not find exactly as listed. A deletion
// nf_tables no longer has is neither removed nor left.
//
// Its error is not the cleanup's: every change it could not settle is
// left, and applying those the usual way reports their own failures; the
// error is kept for when that fails too.
func applyByHandle(f *iptView, table string, changes []iptChange, rep *Report) ([]iptChange, error) {
	hd, ok := f.ipt.(host.HandleDeleter)
	if !ok || len(changes) == 0 {
		return changes, nil
	}
	items := changes
	settled := make([]bool, len(items))
	note := func(i int, o host.HandleOutcome) {
		if o == host.Deleted {
			rep.noteAt(items[i].att, iptEntry(f, items[i]))
		}
		settled[i] = o != host.NotDeleted
	}
	var errs []error
	var ruleItems, chainItems []int
	for i, d := range items {
		switch {
		case d.rule == nil:
			chainItems = append(chainItems, i)
		case position(f, table, d.rule) >= 0:
			ruleItems = append(ruleItems, i)
		}
	}
	// The rules in chunks (what matching them holds stays small), each
	// chain's in order: a rule is found at its position, less the rules
	// before it that earlier chunks removed. (The last first would keep
	// positions as listed, but nf_tables finds a handle by walking the
	// chain from its start.) Then the chains, but those a rule left in
	// place still jumps to.
	slices.SortFunc(ruleItems, func(i, j int) int {
		a, b := items[i].rule, items[j].rule
		return cmp.Or(strings.Compare(a.Chain, b.Chain), cmp.Compare(a.Pos, b.Pos))
	})
	removed := map[string]int{} // by chain
	for chunk := range slices.Chunk(ruleItems, iptDeleteChunk) {
		rules := make([]host.ListedRule, len(chunk))
		for k, i := range chunk {
			r := items[i].rule
			rules[k] = host.ListedRule{Line: r.Line, Position: int(r.Pos) - removed[r.Chain]}
		}
		out, _, err := hd.DeleteByHandle(table, rules, nil)
		for k, o := range out {
			note(chunk[k], o)
			if o == host.Deleted || o == host.AlreadyGone {
				removed[items[chunk[k]].rule.Chain]++
			}
		}
		errs = append(errs, err)
	}
	jumpedTo := map[string]bool{}
	for _, i := range ruleItems {
		if !settled[i] {
			jumpedTo[items[i].rule.Target()] = true
		}
	}
	chainItems = slices.DeleteFunc(chainItems, func(i int) bool { return jumpedTo[items[i].chain] })
	if len(chainItems) > 0 {
		chains := make([]string, len(chainItems))
		for k, i := range chainItems {
			chains[k] = items[i].chain
		}
		_, out, err := hd.DeleteByHandle(table, nil, chains)
		for k, o := range out {
			note(chainItems[k], o)
		}
		errs = append(errs, err)
	}
	var rest []iptChange
	for i, d := range items {
		if !settled[i] {
			rest = append(rest, d)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		err = fmt.Errorf("%s: deleting by handle in %s: %w", f.name(), table, err)
	}
	return rest, err
}

// iptDeleteChunk is how many rules are handed to a HandleDeleter at once:
// each call dumps the chains its rules are in, and holds what it matched
// them with.
const iptDeleteChunk = 8192

// position returns r's index among the rules of its chain in the listing
// the view holds now, or -1 when r is not of that listing (it was read
// again since).
func position(f *iptView, table string, r *iptables.Rule) int {
	rules, _ := f.rules(table, r.Chain)
	if int(r.Pos) < len(rules) && &rules[r.Pos] == r {
		return int(r.Pos)
	}
	return -1
}
