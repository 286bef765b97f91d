package footprint

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet/host"
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
	if err := restorer.RestoreNoFlush(table, lines); err != nil {
		return false, err
	}
	for _, c := range batch {
		rep.noteAt(c.att, iptEntry(f, c))
	}
	return true, nil
}

func applyIPTOne(f *iptView, c iptChange, errs *errList, rep *Report) {
	var err error
	if c.rule != nil {
		err = f.ipt.Delete(c.tableName(), c.rule.Chain, c.rule.Args()...)
	} else {
		err = f.ipt.ClearAndDeleteChain(c.tableName(), c.chain)
	}
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
