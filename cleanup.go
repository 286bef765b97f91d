package cninet

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
)

// IPTables is the subset of *iptables.IPTables (github.com/coreos/go-iptables)
// that cleanup uses; *iptables.IPTables satisfies it unchanged. Tests replace
// it with a fake through Config.IPTables. An implementation may also offer
// TableLister and Restorer to save processes.
type IPTables interface {
	// List returns the rules of one chain as `iptables -t table -S chain`
	// prints them, the chain's own -N or -P line first. A chain that does
	// not exist is an error.
	List(table, chain string) ([]string, error)
	// Delete deletes one rule by its specification.
	Delete(table, chain string, rulespec ...string) error
	// ClearAndDeleteChain flushes and deletes a chain; a chain that does not
	// exist is not an error.
	ClearAndDeleteChain(table, chain string) error
}

// isNotExist reports whether err says a chain or rule does not exist, for
// go-iptables errors and for fakes that mimic iptables' messages.
func isNotExist(err error) bool {
	var ne interface{ IsNotExist() bool }
	if errors.As(err, &ne) {
		return ne.IsNotExist()
	}
	msg := err.Error()
	return strings.Contains(msg, "No chain/target/match by that name") ||
		strings.Contains(msg, "does not exist") || strings.Contains(msg, "Bad rule")
}

// cleaner removes the footprint (DESIGN.md) of a set of attachments of one
// network: Teardown uses it for one id, GC for every dead one. It scans
// first, decides by the ownership rule, then deletes; one is built per call.
type cleaner struct {
	info     networkInfo
	ifName   string
	cacheDir string
	tables   func(ipv6 bool) (IPTables, error)
	batch    bool // apply iptables deletions through Restorer when offered

	files    hostFiles
	prior    hostFiles // files as they were before DEL, as proof of addresses
	families [2]*familyTables

	mu      sync.Mutex
	removed []GCItem
	errs    []error
}

func (c *cleaner) noteRemoved(kind GCKind, id, detail string) {
	c.mu.Lock()
	c.removed = append(c.removed, GCItem{Kind: kind, ID: id, Detail: detail})
	c.mu.Unlock()
}

func (c *cleaner) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *cleaner) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w in network %q: %w", ErrCleanupFailed, c.info.name, errors.Join(c.errs...))
}

func (c *cleaner) owner(id string) owner { return owner{network: c.info.name, id: id} }

// cleanOne removes everything of one attachment: Teardown's force
// cleanup, after DEL. c.prior must hold the files as scanned before DEL;
// only those of this id are read again, since nothing else can have
// changed for it while its lock is held.
func (c *cleaner) cleanOne(id string) error {
	ids := map[string]bool{id: true}
	c.files = c.prior.refresh(ids)
	c.forEachFamily(func(t *familyTables) { t.clean(ids) })
	c.removeFiles(ids)
	return c.err()
}

// forEachFamily runs fn for iptables and ip6tables in parallel: the two
// share nothing, and each listing costs a process.
func (c *cleaner) forEachFamily(fn func(*familyTables)) {
	var wg sync.WaitGroup
	for i, v6 := range []bool{false, true} {
		if c.families[i] == nil {
			ipt, err := c.tables(v6)
			if err != nil {
				c.fail(fmt.Errorf("%s: %w: %v", familyName(v6), ErrIPTablesMissing, err))
				continue
			}
			c.families[i] = &familyTables{ipt: ipt, v6: v6, c: c}
		}
		wg.Add(1)
		go func(t *familyTables) {
			defer wg.Done()
			fn(t)
		}(c.families[i])
	}
	wg.Wait()
}

func familyName(v6 bool) string {
	if v6 {
		return "ip6tables"
	}
	return "iptables"
}

// familyTables is one family's iptables during one cleaner run: listings
// are taken once and kept.
type familyTables struct {
	ipt      IPTables
	v6       bool
	c        *cleaner
	listings map[string]*tableListing // "table" (whole) or "table/chain"
	saved    bool                     // listings hold every table (Saver)
}

// list returns the parsed rules of a chain; ok is false when the chain
// does not exist or could not be listed (the latter is recorded).
func (t *familyTables) list(table, chain string) (rules []rule, ok bool) {
	rules, ok = t.listing(table, chain).chains[chain]
	return rules, ok
}

// listing returns a listing holding chain, taken once and the cheapest way
// the IPTables offers: every table at once (Saver), the whole table
// (TableLister), or just the chain.
func (t *familyTables) listing(table, chain string) *tableListing {
	if t.listings == nil {
		t.listings = map[string]*tableListing{}
	}
	if saver, ok := t.ipt.(Saver); ok {
		t.saveAll(saver)
		return t.listings[table]
	}
	key, list := table+"/"+chain, func() ([]string, error) { return t.ipt.List(table, chain) }
	if lister, ok := t.ipt.(TableLister); ok {
		key, list = table, func() ([]string, error) { return lister.ListTable(table) }
	}
	if l, done := t.listings[key]; done {
		return l
	}
	lines, err := list()
	if err != nil && !isNotExist(err) {
		t.c.fail(fmt.Errorf("%s: listing %s: %w", familyName(t.v6), key, err))
	}
	l := parseListing(lines) // empty on error: nothing is deleted blind
	t.listings[key] = l
	return l
}

// saveAll lists every table at once, the first time it is called.
func (t *familyTables) saveAll(saver Saver) {
	if t.saved {
		return
	}
	t.saved = true
	tables, err := saver.SaveAll()
	if err != nil {
		t.c.fail(fmt.Errorf("%s: listing all tables: %w", familyName(t.v6), err))
	}
	for _, table := range []string{"nat", "filter"} {
		t.listings[table] = parseListing(tables[table]) // empty on error: nothing is deleted blind
	}
}

// deletion is one planned iptables change.
type deletion struct {
	table, id string
	rule      *rule  // a rule to delete, or
	chain     string // a chain to flush and delete
}

// clean plans and applies the deletions for the attachments in ids.
func (t *familyTables) clean(ids map[string]bool) {
	var plan []deletion
	proven, others := t.planMasquerade(ids, &plan)
	t.planDNAT(ids, &plan)
	for _, id := range sortedKeys(ids) {
		o := t.c.owner(id)
		for _, ch := range []string{o.masqChain(), o.dnatChain(), o.snatChain()} {
			if _, ok := t.list("nat", ch); ok {
				plan = append(plan, deletion{table: "nat", id: id, chain: ch})
			}
		}
	}
	t.c.prior.addresses(ids, t.v6, proven, map[netip.Addr]bool{})
	t.c.files.addresses(ids, t.v6, proven, others)
	t.planFirewall(ids, proven, others, &plan)
	t.apply(plan)
}

// planMasquerade plans the deletion of the bridge plugin's POSTROUTING
// jumps of ids. It returns the addresses those jumps masqueraded, proof the
// attachment held them, and the addresses other attachments' jumps name.
func (t *familyTables) planMasquerade(ids map[string]bool, plan *[]deletion) (proven map[netip.Addr]string, others map[netip.Addr]bool) {
	proven, others = map[netip.Addr]string{}, map[netip.Addr]bool{}
	byComment := t.c.commentIndex(ids, owner.masqComment)
	rules, _ := t.list("nat", "POSTROUTING")
	for i := range rules {
		r := &rules[i]
		addr, hasAddr := hostAddr(r.source)
		if id, ok := ownerOf(*r, byComment[r.comment], t.c, owner.ownsMasqJump); ok {
			*plan = append(*plan, deletion{table: "nat", id: id, rule: r})
			if hasAddr {
				proven[addr] = id
			}
		} else if hasAddr && isCNIComment(r.comment) {
			others[addr] = true
		}
	}
	return proven, others
}

// commentIndex maps each stored comment of ids to the ids that could have
// written it: cut comments can stand for several.
func (c *cleaner) commentIndex(ids map[string]bool, comment func(owner) string) map[string][]string {
	index := make(map[string][]string, len(ids))
	for id := range ids {
		stored := storedComment(comment(c.owner(id)))
		index[stored] = append(index[stored], id)
	}
	return index
}

// ownerOf returns the candidate id that owns r.
func ownerOf(r rule, candidates []string, c *cleaner, owns func(owner, rule) bool) (string, bool) {
	for _, id := range candidates {
		if owns(c.owner(id), r) {
			return id, true
		}
	}
	return "", false
}

// masqOwner returns the id a POSTROUTING rule's comment names, when it is
// exactly the bridge plugin's comment for this network.
func (c *cleaner) masqOwner(r *rule) (string, bool) {
	if r.chain != "POSTROUTING" {
		return "", false
	}
	return c.commentOwner(r.comment)
}

// commentOwner returns the id a bridge plugin comment of this network names.
func (c *cleaner) commentOwner(comment string) (string, bool) {
	prefix := fmt.Sprintf("name: %q id: ", c.info.name)
	if !strings.HasPrefix(comment, prefix) {
		return "", false
	}
	id, err := unquote(strings.TrimPrefix(comment, prefix))
	if err != nil || c.owner(id).masqComment() != comment {
		return "", false
	}
	return id, true
}

// planDNAT plans the deletion of portmap's CNI-HOSTPORT-DNAT jumps of ids.
func (t *familyTables) planDNAT(ids map[string]bool, plan *[]deletion) {
	byComment := t.c.commentIndex(ids, owner.dnatComment)
	rules, _ := t.list("nat", hostportDNATChain)
	for i := range rules {
		if id, ok := ownerOf(rules[i], byComment[rules[i].comment], t.c, owner.ownsDNATJump); ok {
			*plan = append(*plan, deletion{table: "nat", id: id, rule: &rules[i]})
		}
	}
}

// planFirewall plans the deletion of the firewall plugin's comment-less
// CNI-FORWARD rules for proven addresses, unless another attachment holds
// the address now: its rules look exactly the same.
func (t *familyTables) planFirewall(ids map[string]bool, proven map[netip.Addr]string, others map[netip.Addr]bool, plan *[]deletion) {
	owned := map[netip.Addr]string{}
	for a, id := range proven {
		if !others[a] && !t.c.heldByOther(a, ids) {
			owned[a] = id
		}
	}
	if len(owned) == 0 {
		return // nothing proven: CNI-FORWARD need not even be listed
	}
	rules, _ := t.list("filter", firewallChain)
	for i := range rules {
		if a, ok := firewallRuleAddr(rules[i]); ok && owned[a] != "" {
			*plan = append(*plan, deletion{table: "filter", id: owned[a], rule: &rules[i]})
		}
	}
}

// apply deletes rules before chains (a chain still jumped to cannot go),
// in one iptables-restore per table when batching, else one by one.
func (t *familyTables) apply(plan []deletion) {
	sort.SliceStable(plan, func(i, j int) bool { return plan[i].rule != nil && plan[j].rule == nil })
	for _, table := range []string{"nat", "filter"} {
		var items []deletion
		for _, d := range plan {
			if d.table == table {
				items = append(items, d)
			}
		}
		if len(items) > 0 && !t.applyBatch(table, items) {
			for _, d := range items {
				t.applyOne(d)
			}
		}
	}
}

func (t *familyTables) applyBatch(table string, items []deletion) bool {
	restorer, ok := t.ipt.(Restorer)
	if !t.c.batch || !ok {
		return false
	}
	var lines []string
	for _, d := range items {
		if d.rule != nil {
			lines = append(lines, "-D"+strings.TrimPrefix(d.rule.line, "-A"))
		} else {
			lines = append(lines, "-F "+d.chain, "-X "+d.chain)
		}
	}
	if err := restorer.RestoreNoFlush(table, lines); err != nil {
		return false // a concurrent change can refuse the whole batch; go one by one
	}
	for _, d := range items {
		t.noteRemoved(d)
	}
	return true
}

func (t *familyTables) applyOne(d deletion) {
	var err error
	if d.rule != nil {
		err = t.ipt.Delete(d.table, d.rule.chain, d.rule.spec...)
	} else {
		err = t.ipt.ClearAndDeleteChain(d.table, d.chain)
	}
	if err != nil && !isNotExist(err) {
		t.c.fail(fmt.Errorf("%s: deleting %s: %w", familyName(t.v6), describe(d), err))
		return
	}
	t.noteRemoved(d)
}

func (t *familyTables) noteRemoved(d deletion) {
	kind := GCRule
	if d.rule == nil {
		kind = GCChain
	}
	t.c.noteRemoved(kind, d.id, familyName(t.v6)+" "+describe(d))
}

func describe(d deletion) string {
	if d.rule != nil {
		return fmt.Sprintf("%s rule %s", d.table, d.rule.line)
	}
	return fmt.Sprintf("%s chain %s", d.table, d.chain)
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
