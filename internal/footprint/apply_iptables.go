package footprint

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/hostwork"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// applyIPT applies one family's changes: rule deletions, then chain
// deletions (a chain still jumped to cannot go); each table in one iptables-restore where the IPTables offers it,
// else one change at a time. Only what was really removed is reported: a
// rule already gone is not.
func applyIPT(f *iptView, changes []iptChange, errs *errList, rep *Report) {
	var changed []string
	defer func() { // not before: the next table's rules are found in the listing held now
		for _, table := range changed {
			f.forget(table, "")
		}
	}()
	slices.SortStableFunc(changes, func(a, b iptChange) int {
		return cmp.Or(cmp.Compare(a.table, b.table), cmp.Compare(iptOrder(a), iptOrder(b)))
	})
	for len(changes) > 0 { // a table's changes at a time, not copied: a sweep has hundreds of thousands
		table := changes[0].tableName()
		n := 1
		for n < len(changes) && changes[n].table == changes[0].table {
			n++
		}
		batch := changes[:n]
		changes = changes[n:]
		batch, byHandle := applyByHandle(f, table, batch, rep) // nf_tables: by handle what matches exactly
		if len(batch) == 0 {
			continue
		}
		done, err := applyIPTBatch(f, table, batch, rep)
		if cutShort(err) {
			errs.add(fmt.Errorf("%s: %d change(s) to table %s not applied: %w", f.name(), len(batch), table, err))
			continue // one by one would only wait for the same lock, or run past the deadline
		}
		if !done {
			errs.add(byHandle) // reported only when the usual way fails too
			for _, c := range batch {
				applyIPTOne(f, c, errs, rep)
			}
		}
		changed = append(changed, table)
	}
}

func iptOrder(c iptChange) int {
	if c.rule == nil {
		return 1
	}
	return 0
}

// applyIPTBatch applies a table's changes in one iptables-restore: all of
// them or, when a concurrent change makes one fail, none (then the caller
// goes one by one).
func applyIPTBatch(f *iptView, table string, batch []iptChange, rep *Report) (bool, error) {
	restorer, ok := f.ipt.(host.Restorer)
	if !ok {
		return false, nil
	}
	lines := make([]string, 0, len(batch))
	for _, c := range batch {
		if c.rule != nil {
			lines = append(lines, "-D"+strings.TrimPrefix(c.rule.Line, "-A"))
		} else {
			lines = append(lines, "-F "+c.chain, "-X "+c.chain)
		}
	}
	end := f.meter.Begin(hostwork.Write, f.name()+"-restore "+table, true)
	err := restorer.RestoreNoFlush(table, lines)
	end(0, 0)
	if err != nil {
		return false, err
	}
	for _, c := range batch {
		rep.noteAt(c.att, iptEntry(f, c))
	}
	return true, nil
}

func applyIPTOne(f *iptView, c iptChange, errs *errList, rep *Report) {
	var err error
	end := f.meter.Begin(hostwork.Write, f.name()+" "+describeIPT(c), true)
	if c.rule != nil {
		err = f.ipt.Delete(c.tableName(), c.rule.Chain, c.rule.Args()...)
	} else {
		err = f.ipt.ClearAndDeleteChain(c.tableName(), c.chain)
	}
	end(0, 0)
	if err != nil {
		if iptables.IsNotExist(err) {
			return // gone meanwhile: not removed by this run
		}
		errs.add(fmt.Errorf("%s: %s: %w", f.name(), describeIPT(c), err))
		return
	}
	rep.noteAt(c.att, iptEntry(f, c))
}

// iptEntry is a change as the report keeps it: the rule's line or the
// chain's name, shared with the listing.
func iptEntry(f *iptView, c iptChange) entry {
	if c.rule == nil {
		return entry{detail: c.chain, shape: shapeIPTChain, v6: f.v6, table: c.table}
	}
	return entry{detail: c.rule.Line, shape: shapeIPTRule, v6: f.v6, table: c.table}
}

// describeIPT says what a change is, for errors.
func describeIPT(c iptChange) string {
	if c.rule != nil {
		return c.tableName() + " rule " + c.rule.Line
	}
	return c.tableName() + " chain " + c.chain
}

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
			listed, _ := f.rules(table, r.Chain)
			rules[k] = host.ListedRule{Line: r.Line, Position: int(r.Pos) - removed[r.Chain], ChainLen: len(listed) - removed[r.Chain]}
		}
		end := f.meter.Begin(hostwork.Write, f.name()+" rules by handle in "+table, false)
		out, _, err := hd.DeleteByHandle(table, rules, nil)
		end(0, 0)
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
		end := f.meter.Begin(hostwork.Write, f.name()+" chains by handle in "+table, false)
		_, out, err := hd.DeleteByHandle(table, nil, chains)
		end(0, 0)
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
