package fakes

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// NFTables is a fake host.NFTables. The zero value holds no table.
type NFTables struct {
	mu    sync.Mutex
	state nftState
	calls []string
	// watchers are the channels of WatchChanges whose context runs.
	watchers []chan struct{}

	// FailList, FailDelete, FailAdd, FailScript and FailWatch, when set,
	// are returned by every ListRules, DeleteRules, AddRules, RunScript
	// or WatchChanges call.
	FailList, FailDelete, FailAdd, FailScript, FailWatch error
}

// nftState is what the fake holds; a script changes a copy of it, which
// replaces it whole when every line applied.
type nftState struct {
	tables map[host.NFTable]bool
	// chains are those a script added and those holding or having held
	// a rule; a flush of the ruleset alone removes them.
	chains map[nftChain]bool
	rules  []host.NFTRule
	// handles is the last handle given in each table: like nf_tables,
	// the fake never gives one twice.
	handles map[host.NFTable]int
}

type nftChain struct {
	table host.NFTable
	name  string
}

// clone is a copy of s that changes independently of it.
func (s *nftState) clone() nftState {
	c := nftState{tables: map[host.NFTable]bool{}, chains: map[nftChain]bool{}, handles: map[host.NFTable]int{},
		rules: slices.Clone(s.rules)}
	maps.Copy(c.tables, s.tables)
	maps.Copy(c.chains, s.chains)
	maps.Copy(c.handles, s.handles)
	return c
}

// add adds r to its table and chain, creating them, with the handle it
// has (fresh: the table's next one).
func (s *nftState) add(r host.NFTRule, fresh bool) {
	if s.tables == nil {
		s.tables, s.chains, s.handles = map[host.NFTable]bool{}, map[nftChain]bool{}, map[host.NFTable]int{}
	}
	t := host.NFTable{Family: r.Family, Name: r.Table}
	if fresh {
		r.Handle = s.handles[t] + 1
	}
	s.handles[t] = max(s.handles[t], r.Handle)
	s.tables[t] = true
	s.chains[nftChain{t, r.Chain}] = true
	s.rules = append(s.rules, r)
}

// changed tells every watcher that the ruleset changed, without waiting
// for any: one pending signal is enough. f.mu is held.
func (f *NFTables) changed() {
	for _, w := range f.watchers {
		select {
		case w <- struct{}{}:
		default:
		}
	}
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

// Add adds rules as they are, handles included, creating their tables
// and chains.
func (f *NFTables) Add(rules ...host.NFTRule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range rules {
		f.state.add(r, false)
	}
	if len(rules) > 0 {
		f.changed()
	}
}

// Rules returns the rules held, in the order they were added.
func (f *NFTables) Rules() []host.NFTRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]host.NFTRule(nil), f.state.rules...)
}

// FlushTable drops every rule of table and keeps its chains, as `nft
// flush table` does: a foreign change (a firewall reload) for tests.
func (f *NFTables) FlushTable(table host.NFTable) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state.rules = slices.DeleteFunc(f.state.rules, func(r host.NFTRule) bool {
		return r.Family == table.Family && r.Table == table.Name
	})
	f.changed()
}

// FlushRuleset drops every table, chain and rule, as `nft flush ruleset`
// does: a foreign change for tests.
func (f *NFTables) FlushRuleset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = nftState{handles: f.state.handles} // handles are still never given twice
	f.changed()
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
	for _, r := range f.state.rules {
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
		i := f.state.index(table, r.Chain, r.Handle)
		if i < 0 {
			return fmt.Errorf("Error: Could not process rule: No such file or directory: delete rule %s %s handle %d", table, r.Chain, r.Handle)
		}
		drop[i] = true
	}
	kept := f.state.rules[:0:0]
	for i, r := range f.state.rules {
		if !drop[i] {
			kept = append(kept, r)
		}
	}
	f.state.rules = kept
	if len(rules) > 0 {
		f.changed()
	}
	return nil
}

// AddRules adds rules as a transaction would: each gets the next handle
// of its table.
func (f *NFTables) AddRules(_ context.Context, rules []host.NFTRule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("AddRules %d", len(rules)))
	if f.FailAdd != nil {
		return f.FailAdd
	}
	for _, r := range rules {
		f.state.add(r, true)
	}
	if len(rules) > 0 {
		f.changed()
	}
	return nil
}

func (s *nftState) index(table host.NFTable, chain string, handle int) int {
	for i, r := range s.rules {
		if r.Family == table.Family && r.Table == table.Name && r.Chain == chain && r.Handle == handle {
			return i
		}
	}
	return -1
}

// Matching adds the host.NFTRuleMatcher, host.NFTRuleFinder and
// host.NFTRuleLookup extensions to an NFTables, like the host's, which
// reads nf_tables over netlink. A rule's sketch carries the addresses it
// names.
type Matching struct {
	*NFTables
	// FailMatch, when set, is returned by every AnyRule and FindRules
	// call; FailFind by every FindRules call; FailLookup by every
	// LookupRule call.
	FailMatch, FailFind, FailLookup error
}

// FindRules implements host.NFTRuleFinder: the rules of chains whose
// comment is one of comments, and nothing of the other chains. Its call
// is recorded as "FindRules <family> <table> <chain>, ...".
func (m Matching) FindRules(_ context.Context, chains []host.NFTChain, comments []string) ([]host.NFTRuleSketch, error) {
	m.mu.Lock()
	names := make([]string, len(chains))
	for i, c := range chains {
		names[i] = c.Table.String() + " " + c.Name
	}
	m.calls = append(m.calls, "FindRules "+strings.Join(names, ", "))
	rules := append([]host.NFTRule(nil), m.state.rules...)
	m.mu.Unlock()
	if err := cmp.Or(m.FailMatch, m.FailFind); err != nil {
		return nil, err
	}
	var out []host.NFTRuleSketch
	for _, r := range rules {
		t := host.NFTable{Family: r.Family, Name: r.Table}
		if slices.Contains(chains, host.NFTChain{Table: t, Name: r.Chain}) && slices.Contains(comments, r.Comment) {
			out = append(out, host.NFTRuleSketch{Table: t, Chain: r.Chain, Handle: r.Handle, Comment: r.Comment, Raw: sketchRaw(r)})
		}
	}
	return out, nil
}

// AnyRule implements host.NFTRuleMatcher.
func (m Matching) AnyRule(_ context.Context, tables []host.NFTable, match func(host.NFTRuleSketch) bool) (bool, error) {
	m.mu.Lock()
	m.calls = append(m.calls, "AnyRule")
	rules := append([]host.NFTRule(nil), m.state.rules...)
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
	i := m.state.index(table, chain, handle)
	if i < 0 {
		return host.NFTRuleSketch{}, false, nil
	}
	r := m.state.rules[i]
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

// WatchChanges implements host.NFTChangeWatcher: the channel receives
// after every change the fake makes (Add, Load, DeleteRules, AddRules,
// RunScript, FlushTable, FlushRuleset), holding one pending signal at
// most, and is closed when ctx ends.
func (f *NFTables) WatchChanges(ctx context.Context) (<-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "WatchChanges")
	if f.FailWatch != nil {
		return nil, f.FailWatch
	}
	w := make(chan struct{}, 1)
	f.watchers = append(f.watchers, w)
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.watchers = slices.DeleteFunc(f.watchers, func(c chan struct{}) bool { return c == w })
		close(w) // under f.mu: changed never sends on it after
	}()
	return w, nil
}

// Watchers returns how many WatchChanges channels are open. A channel
// is closed, and no longer counted, soon after its context ends: wait
// for it to be closed before counting.
func (f *NFTables) Watchers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers)
}
