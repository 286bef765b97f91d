package fakes

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
)

// IPTablesError mimics go-iptables' error: IsNotExist says whether the
// chain or rule was missing, which cleanup takes as already clean.
type IPTablesError struct {
	Msg      string
	NotExist bool
}

// Error implements error.
func (e *IPTablesError) Error() string { return e.Msg }

// IsNotExist is what go-iptables' error answers.
func (e *IPTablesError) IsNotExist() bool { return e.NotExist }

var builtin = map[string][]string{
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
}

// IPTables is a fake host.IPTables: one family's nat and filter tables,
// held as `iptables -S` prints them. Create it with NewIPTables.
type IPTables struct {
	mu     sync.Mutex
	tables map[string]map[string][]string // table -> chain -> "-A ..." lines
	calls  []string

	// FailList and FailDelete make List, or Delete and ClearAndDeleteChain,
	// of the named "table/chain" fail with the given error; FailWrite
	// makes NewChain, Append and Insert of it fail.
	FailList, FailDelete, FailWrite map[string]error
}

// NewIPTables returns tables holding only the built-in chains.
func NewIPTables() *IPTables {
	t := &IPTables{tables: map[string]map[string][]string{},
		FailList: map[string]error{}, FailDelete: map[string]error{}, FailWrite: map[string]error{}}
	for table, chains := range builtin {
		t.tables[table] = map[string][]string{}
		for _, c := range chains {
			t.tables[table][c] = nil
		}
	}
	return t
}

// Load adds the lines of an `iptables -t table -S` listing: -N lines create
// chains, -A lines append rules, anything else is ignored.
func (t *IPTables) Load(table, listing string) *IPTables {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tables[table] == nil {
		t.tables[table] = map[string][]string{}
	}
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "-N":
			if _, ok := t.tables[table][f[1]]; !ok {
				t.tables[table][f[1]] = nil
			}
		case "-A":
			t.tables[table][f[1]] = append(t.tables[table][f[1]], strings.TrimSpace(line))
		}
	}
	return t
}

// Ensure is Load for lines that must be there once: a -A line already in
// its chain is not added again, as the plugins check before they append
// the rules they share.
func (t *IPTables) Ensure(table, listing string) *IPTables {
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "-A" && slices.Contains(t.Rules(table, f[1]), strings.TrimSpace(line)) {
			continue
		}
		t.Load(table, line)
	}
	return t
}

// Unload takes away what Load added: the -A lines, then the -N chains,
// left empty and unreferenced, as a plugin's DEL deletes its own rules
// and chains. What is not there is passed over.
func (t *IPTables) Unload(table, listing string) *IPTables {
	t.mu.Lock()
	defer t.mu.Unlock()
	var chains []string
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) < 2:
		case f[0] == "-N":
			chains = append(chains, f[1])
		case f[0] == "-A":
			rules := t.tables[table][f[1]]
			if i := slices.Index(rules, strings.TrimSpace(line)); i >= 0 {
				t.tables[table][f[1]] = append(rules[:i:i], rules[i+1:]...)
			}
		}
	}
	for _, c := range chains {
		delete(t.tables[table], c)
	}
	return t
}

// LoadSave adds an iptables-save dump: "*table" selects the table,
// ":CHAIN" lines create chains, -A lines append rules.
func (t *IPTables) LoadSave(dump string) *IPTables {
	table := ""
	for _, line := range strings.Split(dump, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimPrefix(line, "*")
		case strings.HasPrefix(line, ":") && table != "":
			t.Load(table, "-N "+strings.Fields(line[1:])[0])
		case strings.HasPrefix(line, "-A ") && table != "":
			t.Load(table, line)
		}
	}
	return t
}

// Save returns the table as `iptables -t table -S` prints it, chains sorted.
func (t *IPTables) Save(table string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, c := range t.chainNames(table) {
		b.WriteString(header(table, c) + "\n")
	}
	for _, c := range t.chainNames(table) {
		for _, r := range t.tables[table][c] {
			b.WriteString(r + "\n")
		}
	}
	return b.String()
}

func (t *IPTables) chainNames(table string) []string {
	var names []string
	for c := range t.tables[table] {
		names = append(names, c)
	}
	sort.Strings(names)
	return names
}

func header(table, chain string) string {
	for _, b := range builtin[table] {
		if b == chain {
			return "-P " + chain + " ACCEPT"
		}
	}
	return "-N " + chain
}

// Calls returns every call received, like "List nat POSTROUTING".
func (t *IPTables) Calls() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.calls...)
}

// Count returns how many received calls start with prefix.
func (t *IPTables) Count(prefix string) int {
	n := 0
	for _, c := range t.Calls() {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// Rules returns the rules of a chain, nil if it does not exist.
func (t *IPTables) Rules(table, chain string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.tables[table][chain]...)
}

// HasChain reports whether a chain exists.
func (t *IPTables) HasChain(table, chain string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.tables[table][chain]
	return ok
}

func notExist(table, chain string) error {
	return &IPTablesError{Msg: fmt.Sprintf("running [iptables -t %s -S %s]: exit status 1: iptables: No chain/target/match by that name.", table, chain), NotExist: true}
}

// List implements host.IPTables.
func (t *IPTables) List(table, chain string) ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, "List "+table+" "+chain)
	if err := t.FailList[table+"/"+chain]; err != nil {
		return nil, err
	}
	rules, ok := t.tables[table][chain]
	if !ok {
		return nil, notExist(table, chain)
	}
	return append([]string{header(table, chain)}, rules...), nil
}

// Delete implements host.IPTables: the rule must match a listed one
// exactly, as iptables -D requires.
func (t *IPTables) Delete(table, chain string, spec ...string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, "Delete "+table+" "+chain+" "+strings.Join(spec, " "))
	if err := t.FailDelete[table+"/"+chain]; err != nil {
		return err
	}
	want := "-A " + chain + " " + FormatRule(spec)
	rules := t.tables[table][chain]
	for i, r := range rules {
		if r == want {
			t.tables[table][chain] = append(rules[:i:i], rules[i+1:]...)
			return nil
		}
	}
	return &IPTablesError{Msg: fmt.Sprintf("running [iptables -t %s -D %s ...]: exit status 1: iptables: Bad rule (does a matching rule exist in that chain?).", table, chain), NotExist: true}
}

// ClearAndDeleteChain implements host.IPTables. Like iptables it refuses
// to delete a chain that a rule still jumps to.
func (t *IPTables) ClearAndDeleteChain(table, chain string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, "ClearAndDeleteChain "+table+" "+chain)
	if err := t.FailDelete[table+"/"+chain]; err != nil {
		return err
	}
	if _, ok := t.tables[table][chain]; !ok {
		return nil
	}
	for c, rules := range t.tables[table] {
		for _, r := range rules {
			if strings.HasSuffix(r, " -j "+chain) || strings.Contains(r, " -j "+chain+" ") {
				return &IPTablesError{Msg: fmt.Sprintf("iptables: Too many links: chain %s is referenced from %s", chain, c)}
			}
		}
	}
	delete(t.tables[table], chain)
	return nil
}

// Batching adds the optional TableLister and Restorer extensions to an
// IPTables, like the host's iptables-save/-restore.
type Batching struct {
	*IPTables
	// FailRestore, when set, makes every RestoreNoFlush fail unapplied.
	FailRestore error
}

// Saving adds the Saver extension (iptables-save) to a Batching.
type Saving struct{ *Batching }

// SaveAll implements host.Saver.
func (s Saving) SaveAll() (map[string][]string, error) {
	s.mu.Lock()
	s.calls = append(s.calls, "SaveAll")
	tables := make([]string, 0, len(s.tables))
	for table := range s.tables {
		tables = append(tables, table)
	}
	s.mu.Unlock()
	out := map[string][]string{}
	for _, table := range tables {
		out[table] = strings.Split(strings.TrimRight(s.Save(table), "\n"), "\n")
	}
	return out, nil
}

// ListTable implements host.TableLister.
func (b *Batching) ListTable(table string) ([]string, error) {
	b.mu.Lock()
	b.calls = append(b.calls, "ListTable "+table)
	b.mu.Unlock()
	return strings.Split(strings.TrimRight(b.Save(table), "\n"), "\n"), nil
}

// RestoreNoFlush implements host.Restorer: -N, -A, -I (first), -D, -F and -X lines,
// applied all or nothing. Its cost is linear in the table and the lines,
// so that a benchmark of many deletions measures its caller, not the fake.
func (b *Batching) RestoreNoFlush(table string, lines []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, fmt.Sprintf("RestoreNoFlush %s %d", table, len(lines)))
	if b.FailRestore != nil {
		return b.FailRestore
	}
	work := newRestoreWork(b.tables[table])
	for _, line := range lines {
		if err := work.apply(line); err != nil {
			return fmt.Errorf("iptables-restore: line %q: %w", line, err)
		}
	}
	b.tables[table] = work.result()
	return nil
}

func jumpTarget(rule string) string {
	f := strings.Fields(rule)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" {
			return f[i+1]
		}
	}
	return ""
}

// restoreWork is one table as a restore changes it. A deleted rule is
// left as "" until result, and each chain's rules are indexed by their
// text on its first -D, so that a deletion costs the same in a chain of
// any length.
type restoreWork struct {
	chains map[string][]string
	refs   map[string]int              // chain -> rules jumping to it
	index  map[string]map[string][]int // chain -> rule -> positions not deleted, first first
}

func newRestoreWork(tables map[string][]string) *restoreWork {
	w := &restoreWork{chains: map[string][]string{}, refs: map[string]int{}, index: map[string]map[string][]int{}}
	for c, rules := range tables {
		w.chains[c] = append([]string(nil), rules...)
		for _, r := range rules {
			w.refs[jumpTarget(r)]++
		}
	}
	return w
}

// indexOf returns chain's index, built on first use.
func (w *restoreWork) indexOf(chain string) map[string][]int {
	idx, ok := w.index[chain]
	if !ok {
		idx = map[string][]int{}
		for i, r := range w.chains[chain] {
			if r != "" {
				idx[r] = append(idx[r], i)
			}
		}
		w.index[chain] = idx
	}
	return idx
}

func (w *restoreWork) apply(line string) error {
	f := strings.Fields(line)
	if len(f) < 2 {
		return fmt.Errorf("short line")
	}
	chain := f[1]
	if f[0] == "-N" {
		if _, ok := w.chains[chain]; ok {
			return &IPTablesError{Msg: "Chain already exists."}
		}
		w.chains[chain] = nil
		return nil
	}
	rules, ok := w.chains[chain]
	if !ok {
		return &IPTablesError{Msg: "No chain/target/match by that name.", NotExist: true}
	}
	switch f[0] {
	case "-I": // -I CHAIN 1 spec: first, as a restore of a repair writes it
		words, err := restoreWords(line)
		if err != nil || len(words) < 3 || words[2] != "1" {
			return fmt.Errorf("unsupported insertion %q (only -I CHAIN 1)", line)
		}
		rule := "-A " + chain + " " + FormatRule(words[3:])
		w.chains[chain] = slices.Insert(rules, 0, rule)
		delete(w.index, chain)
		w.refs[jumpTarget(rule)]++
		return nil
	case "-D": // the first rule that matches, as iptables deletes
		want := "-A" + strings.TrimPrefix(line, "-D")
		idx := w.indexOf(chain)
		at := idx[want]
		if len(at) == 0 {
			return &IPTablesError{Msg: "Bad rule (does a matching rule exist in that chain?).", NotExist: true}
		}
		rules[at[0]] = ""
		if idx[want] = at[1:]; len(idx[want]) == 0 {
			delete(idx, want)
		}
		w.refs[jumpTarget(want)]--
	case "-A": // stored as iptables -S prints it
		words, err := restoreWords(line)
		if err != nil {
			return err
		}
		line = "-A " + chain + " " + FormatRule(words[2:])
		if idx, ok := w.index[chain]; ok {
			idx[line] = append(idx[line], len(rules))
		}
		w.chains[chain] = append(rules, line)
		w.refs[jumpTarget(line)]++
	case "-F":
		for _, r := range rules {
			if r != "" {
				w.refs[jumpTarget(r)]--
			}
		}
		w.chains[chain] = nil
		delete(w.index, chain)
	case "-X":
		if w.refs[chain] > 0 {
			return fmt.Errorf("chain %s is still referenced", chain)
		}
		delete(w.chains, chain)
		delete(w.index, chain)
	default:
		return fmt.Errorf("unsupported command %s", f[0])
	}
	return nil
}

// restoreWords splits a restore line into its words as iptables-restore
// does: a double-quoted word may hold spaces, and a backslash in it
// escapes the next character.
func restoreWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			quoted, inWord = !quoted, true
		case !quoted && (c == ' ' || c == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// result returns the chains without the deleted rules.
func (w *restoreWork) result() map[string][]string {
	for c, rules := range w.chains {
		if _, changed := w.index[c]; changed {
			w.chains[c] = slices.DeleteFunc(rules, func(r string) bool { return r == "" })
		}
	}
	return w.chains
}

// Probing adds the ChainProber and AddrScanner extensions to a Saving,
// like the host's iptables on the nf_tables backend, whose chains and
// rules are read over netlink.
type Probing struct {
	Saving
	// FailProbe, when set, is returned by every ProbeChain and
	// MayMention.
	FailProbe error
}

// NewProbing wraps ipt with every extension the host's iptables has on the
// nf_tables backend: restore, save and the probes.
func NewProbing(ipt *IPTables) Probing {
	return Probing{Saving: Saving{Batching: &Batching{IPTables: ipt}}}
}

// FailingWith returns p with every probe failing with err (none if nil).
func (p Probing) FailingWith(err error) Probing {
	p.FailProbe = err
	return p
}

// ProbeChain implements host.ChainProber.
func (p Probing) ProbeChain(table, chain string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "ProbeChain "+table+" "+chain)
	if p.FailProbe != nil {
		return false, p.FailProbe
	}
	_, ok := p.tables[table][chain]
	return ok, nil
}

// MayMention implements host.AddrScanner: whether any rule of chain
// names one of addrs, as an address or a prefix.
func (p Probing) MayMention(table, chain string, addrs []netip.Addr) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "MayMention "+table+" "+chain)
	if p.FailProbe != nil {
		return false, p.FailProbe
	}
	for _, r := range p.tables[table][chain] {
		for _, field := range strings.Fields(r) {
			a, err := netip.ParseAddr(strings.SplitN(field, "/", 2)[0])
			if err == nil && slices.Contains(addrs, a) {
				return true, nil
			}
		}
	}
	return false, nil
}

// MayMentionOther implements host.OtherAddrScanner: whether a rule of
// chain names one of addrs and jumps to none of except.
func (p Probing) MayMentionOther(table, chain string, addrs []netip.Addr, except []string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "MayMentionOther "+table+" "+chain)
	if p.FailProbe != nil {
		return false, p.FailProbe
	}
	for _, r := range p.tables[table][chain] {
		if slices.Contains(except, jumpTarget(r)) {
			continue
		}
		for _, field := range strings.Fields(r) {
			a, err := netip.ParseAddr(strings.SplitN(field, "/", 2)[0])
			if err == nil && slices.Contains(addrs, a) {
				return true, nil
			}
		}
	}
	return false, nil
}

// Reset empties every table and deletes every chain but the built-in
// ones, as a firewall reload (iptables -F; iptables -X) does.
func (t *IPTables) Reset() {
	fresh := NewIPTables()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tables = fresh.tables
}
