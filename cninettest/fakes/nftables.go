package fakes

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// NFTables is a fake host.NFTables. The zero value holds no table.
type NFTables struct {
	mu     sync.Mutex
	tables map[host.NFTable]bool
	rules  []host.NFTRule
	calls  []string

	// FailList, FailDelete and FailAdd, when set, are returned by every
	// ListRules, DeleteRules or AddRules call.
	FailList, FailDelete, FailAdd error
}

// Load adds the tables and rules of `nft -j list ruleset|table` output.
func (f *NFTables) Load(listing []byte) error {
	rules, err := nftables.ParseListing(listing)
	if err != nil {
		return err
	}
	f.Add(rules...)
	return nil
}

// Add adds rules, creating their tables.
func (f *NFTables) Add(rules ...host.NFTRule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tables == nil {
		f.tables = map[host.NFTable]bool{}
	}
	for _, r := range rules {
		f.tables[host.NFTable{Family: r.Family, Name: r.Table}] = true
		f.rules = append(f.rules, r)
	}
}

// Rules returns the rules held, in the order they were added.
func (f *NFTables) Rules() []host.NFTRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]host.NFTRule(nil), f.rules...)
}

// Calls returns every call received, like "ListRules" or
// "DeleteRules ip cni_hostport 2".
func (f *NFTables) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// ListRules implements host.NFTables.
func (f *NFTables) ListRules(_ context.Context, tables []host.NFTable) ([]host.NFTRule, error) {
	return f.list(tables, "ListRules", true)
}

// ListRulesBrief implements host.NFTBriefLister: the rules without
// their Expr, so that a caller that would add one of them back cannot.
func (f *NFTables) ListRulesBrief(_ context.Context, tables []host.NFTable) ([]host.NFTRule, error) {
	return f.list(tables, "ListRulesBrief", false)
}

func (f *NFTables) list(tables []host.NFTable, call string, withExpr bool) ([]host.NFTRule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
	if f.FailList != nil {
		return nil, f.FailList
	}
	want := map[host.NFTable]bool{}
	for _, t := range tables {
		want[t] = true
	}
	var out []host.NFTRule
	for _, r := range f.rules {
		if want[host.NFTable{Family: r.Family, Name: r.Table}] {
			if !withExpr {
				r.Expr = nil
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// DeleteRules implements host.NFTables: all of rules, found by
// table, chain and handle, or none.
func (f *NFTables) DeleteRules(_ context.Context, table host.NFTable, rules []host.NFTRule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("DeleteRules %s %d", table, len(rules)))
	if f.FailDelete != nil {
		return f.FailDelete
	}
	drop := map[int]bool{}
	for _, r := range rules {
		i := f.index(table, r.Chain, r.Handle)
		if i < 0 {
			return fmt.Errorf("Error: Could not process rule: No such file or directory: delete rule %s %s handle %d", table, r.Chain, r.Handle)
		}
		drop[i] = true
	}
	kept := f.rules[:0:0]
	for i, r := range f.rules {
		if !drop[i] {
			kept = append(kept, r)
		}
	}
	f.rules = kept
	return nil
}

// AddRules implements host.NFTables: each rule gets the next handle
// of its table.
func (f *NFTables) AddRules(_ context.Context, rules []host.NFTRule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("AddRules %d", len(rules)))
	if f.FailAdd != nil {
		return f.FailAdd
	}
	for _, r := range rules {
		r.Handle = 1
		for _, have := range f.rules {
			if have.Family == r.Family && have.Table == r.Table && have.Handle >= r.Handle {
				r.Handle = have.Handle + 1
			}
		}
		f.rules = append(f.rules, r)
	}
	return nil
}

func (f *NFTables) index(table host.NFTable, chain string, handle int) int {
	for i, r := range f.rules {
		if r.Family == table.Family && r.Table == table.Name && r.Chain == chain && r.Handle == handle {
			return i
		}
	}
	return -1
}

// Matching adds the host.NFTRuleMatcher and host.NFTRuleLookup
// extensions to an NFTables, like the host's, which reads nf_tables over
// netlink. A rule's sketch carries the addresses it names.
type Matching struct {
	*NFTables
	// FailMatch, when set, is returned by every AnyRule call;
	// FailLookup by every LookupRule call.
	FailMatch, FailLookup error
}

// AnyRule implements host.NFTRuleMatcher.
func (m Matching) AnyRule(_ context.Context, tables []host.NFTable, match func(host.NFTRuleSketch) bool) (bool, error) {
	m.mu.Lock()
	m.calls = append(m.calls, "AnyRule")
	rules := append([]host.NFTRule(nil), m.rules...)
	m.mu.Unlock()
	if m.FailMatch != nil {
		return false, m.FailMatch
	}
	for _, r := range rules {
		t := host.NFTable{Family: r.Family, Name: r.Table}
		if !slices.Contains(tables, t) {
			continue
		}
		if match(host.NFTRuleSketch{Table: t, Chain: r.Chain, Handle: r.Handle, Comment: r.Comment, Raw: sketchRaw(r)}) {
			return true, nil
		}
	}
	return false, nil
}

// LookupRule implements host.NFTRuleLookup.
func (m Matching) LookupRule(_ context.Context, table host.NFTable, chain string, handle int) (host.NFTRuleSketch, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, fmt.Sprintf("LookupRule %s %s %d", table, chain, handle))
	if m.FailLookup != nil {
		return host.NFTRuleSketch{}, false, m.FailLookup
	}
	i := m.index(table, chain, handle)
	if i < 0 {
		return host.NFTRuleSketch{}, false, nil
	}
	r := m.rules[i]
	return host.NFTRuleSketch{Table: table, Chain: r.Chain, Handle: r.Handle, Comment: r.Comment, Raw: sketchRaw(r)}, true, nil
}

// sketchRaw stands in for a rule's expressions: the addresses it names,
// as nf_tables would carry them.
func sketchRaw(r host.NFTRule) []byte {
	var raw []byte
	for _, a := range []netip.Addr{r.Saddr, r.Daddr, r.DNAT} {
		if a.IsValid() {
			raw = append(raw, a.AsSlice()...)
		}
	}
	return raw
}
