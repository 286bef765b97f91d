package footprint

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Appender is an optional extension of IPTables: append a rule, as
// go-iptables' Append does. The cleaner adds back, one by one, guarded
// rules of other attachments that a DEL took, when the IPTables cannot
// restore a batch.
type Appender interface {
	Append(table, chain string, rulespec ...string) error
}

// applyIPT applies one family's changes: rule deletions, then chain
// deletions (a chain still jumped to cannot go), then the rules added
// back; each table in one iptables-restore where the IPTables offers it,
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
	switch {
	case c.add:
		return 2
	case c.rule == nil:
		return 1
	}
	return 0
}

// applyIPTBatch applies a table's changes in one iptables-restore: all of
// them or, when a concurrent change makes one fail, none (then the caller
// goes one by one).
func applyIPTBatch(f *iptView, table string, batch []iptChange, rep *Report) (bool, error) {
	restorer, ok := f.ipt.(Restorer)
	if !ok {
		return false, nil
	}
	lines := make([]string, 0, len(batch))
	for _, c := range batch {
		switch {
		case c.add:
			lines = append(lines, c.rule.line)
		case c.rule != nil:
			lines = append(lines, "-D"+strings.TrimPrefix(c.rule.line, "-A"))
		default:
			lines = append(lines, "-F "+c.chain, "-X "+c.chain)
		}
	}
	if err := restorer.RestoreNoFlush(table, lines); err != nil {
		return false, err
	}
	for _, c := range batch {
		rep.noteAt(c.add, c.att, iptEntry(f, c))
	}
	return true, nil
}

func applyIPTOne(f *iptView, c iptChange, errs *errList, rep *Report) {
	var err error
	switch {
	case c.add:
		appender, ok := f.ipt.(Appender)
		if !ok {
			errs.add(fmt.Errorf("%s: cannot add back %s: the IPTables has no Append", f.name(), describeIPT(c)))
			return
		}
		err = appender.Append(c.tableName(), c.rule.chain, c.rule.args()...)
	case c.rule != nil:
		err = f.ipt.Delete(c.tableName(), c.rule.chain, c.rule.args()...)
	default:
		err = f.ipt.ClearAndDeleteChain(c.tableName(), c.chain)
	}
	if err != nil {
		if !c.add && isNotExist(err) {
			return // gone meanwhile: not removed by this run
		}
		errs.add(fmt.Errorf("%s: %s: %w", f.name(), describeIPT(c), err))
		return
	}
	rep.noteAt(c.add, c.att, iptEntry(f, c))
}

// iptEntry is a change as the report keeps it: the rule's line or the
// chain's name, shared with the listing.
func iptEntry(f *iptView, c iptChange) entry {
	if c.rule == nil {
		return entry{detail: c.chain, shape: shapeIPTChain, v6: f.v6, table: c.table}
	}
	return entry{detail: c.rule.line, shape: shapeIPTRule, v6: f.v6, table: c.table}
}

// describeIPT says what a change is, for errors.
func describeIPT(c iptChange) string {
	switch {
	case c.add:
		return c.tableName() + " rule " + c.rule.line + " (added back)"
	case c.rule != nil:
		return c.tableName() + " rule " + c.rule.line
	}
	return c.tableName() + " chain " + c.chain
}
