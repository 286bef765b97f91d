package footprint

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// family is one IP family's iptables during one cleaner run: every
// listing is taken once and kept.
type family struct {
	ipt      IPTables
	v6       bool
	c        *Cleaner
	listings map[string]*tableListing // "table" (whole) or "table/chain"
	saved    bool                     // listings hold every table (Saver)
	masq     *masqScan                // POSTROUTING as read for this run's ids
	exists   map[string]bool          // "table/chain": answers of a ChainProber
	// nftProved says deferred nftables evidence was added to this
	// family's evidence.
	nftProved bool
}

// rules returns the parsed rules of a chain; ok is false when the chain
// does not exist or could not be listed (the latter is recorded).
func (f *family) rules(table, chain string) (rules []rule, ok bool) {
	rules, ok = f.listing(table, chain).chains[chain]
	return rules, ok
}

// listing returns a listing holding chain. A GC sweep lists whole tables,
// the cheapest way the IPTables offers (every table at once with Saver,
// else a table with TableLister); a Teardown lists single chains, so its
// cost follows what the attachment can own, not the host's ruleset.
func (f *family) listing(table, chain string) *tableListing {
	if f.listings == nil {
		f.listings = map[string]*tableListing{}
	}
	key, list := table+"/"+chain, func() ([]string, error) { return f.ipt.List(table, chain) }
	if f.c.whole {
		if saver, ok := f.ipt.(Saver); ok {
			f.saveAll(saver)
			return f.listings[table]
		}
		if lister, ok := f.ipt.(TableLister); ok {
			key, list = table, func() ([]string, error) { return lister.ListTable(table) }
		}
	}
	if l, done := f.listings[key]; done {
		return l
	}
	lines, err := list()
	if err != nil && !isNotExist(err) {
		f.c.fail(fmt.Errorf("%s: listing %s: %w", familyName(f.v6), key, err))
	}
	l := parseListing(lines) // empty on error: nothing is deleted blind
	f.listings[key] = l
	return l
}

// saveAll lists every table at once, the first time it is called.
func (f *family) saveAll(saver Saver) {
	if f.saved {
		return
	}
	f.saved = true
	if streamer, ok := f.ipt.(SaveStreamer); ok {
		f.streamAll(streamer) // parsed as it is read
		return
	}
	tables, err := saver.SaveAll()
	if err != nil {
		f.c.fail(fmt.Errorf("%s: listing all tables: %w", familyName(f.v6), err))
	}
	for _, table := range []string{"nat", "filter"} {
		f.listings[table] = parseListing(tables[table]) // empty on error: nothing is deleted blind
	}
}

// anyChain reports whether a chain named by name for one of ids exists. A
// jump needs its target to exist, so where no chain exists no jump can,
// and the chain holding the jumps need not be listed at all.
func (f *family) anyChain(ids idSet, name func(Attachment) string) bool {
	for id := range ids {
		if f.hasChain("nat", name(Attachment{f.c.net.Name, id})) {
			return true
		}
	}
	return false
}

// hasChain reports whether chain exists: for a Teardown by asking a
// ChainProber first where the IPTables is one, so that only a chain that
// is there costs a listing; else by listing the chain.
func (f *family) hasChain(table, chain string) bool {
	checker, ok := f.ipt.(ChainProber)
	if f.c.whole || !ok {
		_, ok := f.rules(table, chain)
		return ok
	}
	key := table + "/" + chain
	if exists, done := f.exists[key]; done {
		return exists
	}
	exists, err := checker.ProbeChain(table, chain)
	if err != nil || exists {
		// A chain there is confirmed by iptables itself: one it cannot
		// read (written by another tool) is absent to it, and left alone.
		_, exists = f.rules(table, chain)
	}
	if f.exists == nil {
		f.exists = map[string]bool{}
	}
	f.exists[key] = exists
	return exists
}

// mayMention reports whether a rule of chain may be about one of addrs:
// for a Teardown an AddrScanner can rule that out without a listing.
func (f *family) mayMention(table, chain string, addrs map[netip.Addr]string) bool {
	scanner, ok := f.ipt.(AddrScanner)
	if f.c.whole || !ok {
		return true
	}
	list := make([]netip.Addr, 0, len(addrs))
	for a := range addrs {
		list = append(list, a)
	}
	may, err := scanner.MayMention(table, chain, list)
	return may || err != nil
}

// deletion is one planned iptables change.
type deletion struct {
	table, id string
	rule      *rule  // a rule to delete, or
	chain     string // a chain to flush and delete
}

// plan returns the deletions ids' footprints ask for, judged on ev.
func (f *family) plan(ids idSet, ev *evidence) []deletion {
	var plan []deletion
	if f.masq != nil {
		plan = append(plan, f.masq.owned...)
	}
	plan = f.planDNAT(ids, plan)
	plan = f.planChains(ids, plan)
	return f.planFirewall(ids, ev, plan)
}

// masqScan is what POSTROUTING says: the jumps of ids, and the addresses
// other attachments' jumps masquerade.
type masqScan struct {
	owned  []deletion
	proven map[netip.Addr]string
	others map[netip.Addr]bool
}

func (f *family) scanMasquerade(ids idSet) *masqScan {
	if f.masq != nil {
		return f.masq
	}
	s := &masqScan{proven: map[netip.Addr]string{}, others: map[netip.Addr]bool{}}
	byComment := commentIndex(f.c.net.Name, ids, Attachment.MasqComment)
	rules, _ := f.rules("nat", postrouting)
	for i := range rules {
		r := &rules[i]
		addr, hasAddr := hostAddr(r.source)
		if id, ok := ownerOf(*r, f.c.net.Name, byComment[r.comment], Attachment.ownsMasqJump); ok {
			s.owned = append(s.owned, deletion{table: "nat", id: id, rule: r})
			if hasAddr {
				s.proven[addr] = id
			}
		} else if hasAddr && isMasqComment(r.comment) {
			s.others[addr] = true
		}
	}
	f.masq = s
	return s
}

// proveMasquerade reads the bridge plugin's POSTROUTING jumps, where ids
// can have any: the addresses ids' jumps masquerade are proof they held
// them, those of other attachments' jumps are held by others. ids' jumps
// are planned for deletion.
func (f *family) proveMasquerade(ids idSet, ev *evidence) {
	if !f.c.whole && !f.anyChain(ids, Attachment.MasqChain) {
		return
	}
	s := f.scanMasquerade(ids)
	for a, id := range s.proven {
		ev.proven[a] = id
	}
	for a := range s.others {
		ev.others[a] = true
	}
}

// commentIndex maps each stored comment of ids to the ids that could have
// written it: cut comments can stand for several.
func commentIndex(network string, ids idSet, comment func(Attachment) string) map[string][]string {
	index := make(map[string][]string, len(ids))
	for id := range ids {
		stored := storedComment(comment(Attachment{network, id}))
		index[stored] = append(index[stored], id)
	}
	return index
}

// ownerOf returns the candidate id that owns r.
func ownerOf(r rule, network string, candidates []string, owns func(Attachment, rule) bool) (string, bool) {
	for _, id := range candidates {
		if owns(Attachment{network, id}, r) {
			return id, true
		}
	}
	return "", false
}

// planDNAT plans the deletion of portmap's CNI-HOSTPORT-DNAT jumps of ids.
func (f *family) planDNAT(ids idSet, plan []deletion) []deletion {
	if !f.c.whole && !f.anyChain(ids, Attachment.DNATChain) {
		return plan
	}
	byComment := commentIndex(f.c.net.Name, ids, Attachment.DNATComment)
	rules, _ := f.rules("nat", hostportDNATChain)
	for i := range rules {
		if id, ok := ownerOf(rules[i], f.c.net.Name, byComment[rules[i].comment], Attachment.ownsDNATJump); ok {
			plan = append(plan, deletion{table: "nat", id: id, rule: &rules[i]})
		}
	}
	return plan
}

// planChains plans the deletion of the per-attachment chains of ids.
func (f *family) planChains(ids idSet, plan []deletion) []deletion {
	for _, id := range sortedIDs(ids) {
		a := Attachment{f.c.net.Name, id}
		for _, ch := range []string{a.MasqChain(), a.DNATChain(), a.SNATChain()} {
			if f.hasChain("nat", ch) {
				plan = append(plan, deletion{table: "nat", id: id, chain: ch})
			}
		}
	}
	return plan
}

// planFirewall plans the deletion of the firewall plugin's comment-less
// CNI-FORWARD rules for owned addresses.
func (f *family) planFirewall(ids idSet, ev *evidence, plan []deletion) []deletion {
	if owned := ev.owned(f.c.net.IPAMDirs, ids); len(owned) == 0 || !f.mayMention("filter", firewallChain, owned) {
		return plan // nothing proven, or no rule about it: CNI-FORWARD need not even be listed
	}
	rules, _ := f.rules("filter", firewallChain)
	var found []deletion
	for i := range rules {
		if a, ok := firewallRuleAddr(rules[i]); ok && ev.owns[a] != "" {
			found = append(found, deletion{table: "filter", id: ev.owns[a], rule: &rules[i]})
		}
	}
	if len(found) == 0 {
		return plan
	}
	owned := f.completeEvidence(ids, ev)
	for _, d := range found {
		if a, _ := firewallRuleAddr(*d.rule); owned[a] != "" {
			plan = append(plan, d)
		}
	}
	return plan
}

// completeEvidence makes sure ev has heard from every other attachment's
// masquerade jump and nftables rule before a comment-less or bare-id rule
// is judged on it: a Teardown reads POSTROUTING and the nftables tables
// only when it has a reason to, and a rule about to be deleted is one. It
// returns the owned addresses.
func (f *family) completeEvidence(ids idSet, ev *evidence) map[netip.Addr]string {
	if f.masq == nil {
		for a := range f.scanMasquerade(ids).others {
			ev.others[a] = true
		}
		ev.owns = nil
	}
	if !f.nftProved && f.c.proveDeferred(ids, ev, f.v6) {
		ev.owns = nil
	}
	f.nftProved = true
	return ev.owned(f.c.net.IPAMDirs, ids)
}

// discover returns the ids the nat rules of this network name: in the
// jumps, and, where the whole table is listed, inside masquerade chains
// whose jump is already gone.
func (f *family) discover() (ids []string) {
	network := f.c.net.Name
	for _, chain := range []string{postrouting, hostportDNATChain} {
		rules, _ := f.rules("nat", chain)
		for _, r := range rules {
			if id, ok := masqCommentID(network, r.comment); ok && r.chain == postrouting {
				ids = append(ids, id)
			} else if id, ok := dnatCommentID(network, r.comment); ok && r.chain == hostportDNATChain {
				ids = append(ids, id)
			}
		}
	}
	for chain, rules := range f.listing("nat", postrouting).chains {
		if !strings.HasPrefix(chain, "CNI-") || len(rules) == 0 {
			continue
		}
		if id, ok := masqCommentID(network, rules[0].comment); ok && (Attachment{network, id}).MasqChain() == chain {
			ids = append(ids, id)
		}
	}
	return ids
}

// apply deletes rules before chains (a chain still jumped to cannot go),
// in one iptables-restore per table where the IPTables offers it, else
// one by one.
func (f *family) apply(plan []deletion) {
	sort.SliceStable(plan, func(i, j int) bool { return plan[i].rule != nil && plan[j].rule == nil })
	for _, table := range []string{"nat", "filter"} {
		var items []deletion
		for _, d := range plan {
			if d.table == table {
				items = append(items, d)
			}
		}
		items, byHandle := f.applyByHandle(table, items) // nf_tables: by handle what matches exactly
		if len(items) > 0 && !f.applyBatch(table, items) {
			if byHandle != nil {
				f.c.fail(byHandle) // reported only when the usual way fails too
			}
			for _, d := range items {
				f.applyOne(d)
			}
		}
	}
}

func (f *family) applyBatch(table string, items []deletion) bool {
	restorer, ok := f.ipt.(Restorer)
	if !ok {
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
		f.noteRemoved(d)
	}
	return true
}

func (f *family) applyOne(d deletion) {
	var err error
	if d.rule != nil {
		err = f.ipt.Delete(d.table, d.rule.chain, d.rule.args()...)
	} else {
		err = f.ipt.ClearAndDeleteChain(d.table, d.chain)
	}
	if err != nil && !isNotExist(err) {
		f.c.fail(fmt.Errorf("%s: deleting %s: %w", familyName(f.v6), describe(d), err))
		return
	}
	f.noteRemoved(d)
}

func (f *family) noteRemoved(d deletion) {
	kind := KindRule
	if d.rule == nil {
		kind = KindChain
	}
	f.c.noteRemoved(kind, d.id, familyName(f.v6)+" "+describe(d))
}

func describe(d deletion) string {
	if d.rule != nil {
		return fmt.Sprintf("%s rule %s", d.table, d.rule.line)
	}
	return fmt.Sprintf("%s chain %s", d.table, d.chain)
}
