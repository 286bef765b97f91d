package footprint

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/hostwork"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// iptView is one IP family's iptables as a run reads it: each listing
// once. A GC (whole) lists whole tables, the cheapest way the IPTables
// offers (every table at once with Saver, else a table with
// TableLister); a Teardown lists single chains, and only those that
// netlink probes (ChainProber, AddrScanner) cannot rule out.
type iptView struct {
	ipt   host.IPTables
	v6    bool
	whole bool
	errs  *errList
	meter *hostwork.Meter

	mu       sync.Mutex
	listings map[string]*iptables.Listing      // "table" (whole) or "table/chain"
	dropped  struct{ any, sweepsNothing bool } // what drop let go of
	failed   bool                              // a listing failed: what it would show is unknown
	saved    bool
	exists   map[string]bool // "table/chain": a ChainProber's answers
}

func (f *iptView) name() string { return familyName(f.v6) }

// rules returns the parsed rules of a chain; ok is false when the chain
// does not exist or could not be listed (the latter is recorded). A
// chain whose rules a sweep's listing did not keep is listed alone.
func (f *iptView) rules(table, chain string) (rules []iptables.Rule, ok bool) {
	l := f.listing(table, chain)
	if exists, kept := l.Has(chain); exists && !kept {
		l = f.listChain(table, chain)
	}
	rules, ok = l.Chains[chain]
	return rules, ok
}

// listed reports whether chain exists, by the listing that holds it.
func (f *iptView) listed(table, chain string) bool {
	exists, _ := f.listing(table, chain).Has(chain)
	return exists
}

// listing returns a listing holding chain.
func (f *iptView) listing(table, chain string) *iptables.Listing {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listings == nil {
		f.listings = map[string]*iptables.Listing{}
	}
	if f.whole {
		if saver, ok := f.ipt.(host.Saver); ok {
			f.saveAll(saver)
			return f.listings[table]
		}
		if lister, ok := f.ipt.(host.TableLister); ok {
			return f.read(table, func() ([]string, error) { return lister.ListTable(table) }, sweptChains[table])
		}
	}
	return f.read(table+"/"+chain, func() ([]string, error) { return f.ipt.List(table, chain) }, nil)
}

// listChain returns a listing of chain alone.
func (f *iptView) listChain(table, chain string) *iptables.Listing {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.read(table+"/"+chain, func() ([]string, error) { return f.ipt.List(table, chain) }, nil)
}

// read returns the listing under key, listing it the first time; f.mu is
// held.
func (f *iptView) read(key string, list func() ([]string, error), keep map[string]bool) *iptables.Listing {
	if f.listings == nil {
		f.listings = map[string]*iptables.Listing{}
	}
	if l, done := f.listings[key]; done {
		return l
	}
	end := f.meter.Begin(hostwork.List, f.name()+" "+key, true)
	lines, err := list()
	end(len(lines), hostwork.LinesSize(lines))
	if err != nil && !iptables.IsNotExist(err) {
		f.errs.add(fmt.Errorf("%s: listing %s: %w", f.name(), key, err))
		f.failed = true
	}
	l := iptables.ParseListing(lines, keep) // empty on error: nothing is deleted blind
	f.listings[key] = l
	return l
}

// iptReader is a footprint whose plugin writes iptables rules: it names
// the chains the views read for it, so that no view names a plugin's.
type iptReader interface {
	// sharedChains are the shared chains whose rules it reads rule by
	// rule: every run that reads the tables first lists them
	// (listShared), and a sweep that lists whole tables keeps their
	// rules (sweptChains).
	sharedChains() []tableChain
	// checkedChains are the chains whose rules a drift check looks for,
	// listed one by one where the IPTables cannot list a whole table
	// (liveSharedChains).
	checkedChains() []tableChain
	// chainPrefixes are the prefixes of the chains its plugin names
	// after an attachment (isAttachmentChain).
	chainPrefixes() []string
}

// tableChain is a chain of an iptables table.
type tableChain struct{ table, chain string }

// What the views read of iptables, from the iptables footprints in the
// order of footprints, each chain once.
var (
	// sharedIPTChains are the shared chains every run that reads the
	// tables first lists, in this order.
	sharedIPTChains = iptChains(iptReader.sharedChains)
	// sweptTables are the tables cleanup reads, as a sweep lists them.
	sweptTables = tablesOf(sharedIPTChains)
	// sweptChains says, by table, which chains' rules a sweep keeps when
	// it lists whole tables: the shared chains. Every other chain is an
	// attachment's own, flushed and deleted whole; a footprint that reads
	// one rule by rule has it listed alone.
	sweptChains = chainSets(sharedIPTChains)
	// attachmentChainPrefixes are the prefixes of every chain the
	// plugins name after an attachment.
	attachmentChainPrefixes = iptChainPrefixes()
)

// iptChains returns the chains each iptables footprint names when asked
// with chains, in the order of footprints, each chain once.
func iptChains(chains func(iptReader) []tableChain) []tableChain {
	var out []tableChain
	for _, fp := range footprints {
		if r, ok := fp.(iptReader); ok {
			for _, c := range chains(r) {
				if !slices.Contains(out, c) {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// tablesOf returns the tables of chains, in the order they first appear.
func tablesOf(chains []tableChain) []string {
	var out []string
	for _, c := range chains {
		if !slices.Contains(out, c.table) {
			out = append(out, c.table)
		}
	}
	return out
}

// chainSets returns chains as a set of chains by table.
func chainSets(chains []tableChain) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, c := range chains {
		if out[c.table] == nil {
			out[c.table] = map[string]bool{}
		}
		out[c.table][c.chain] = true
	}
	return out
}

// iptChainPrefixes returns every iptables footprint's chain prefixes.
func iptChainPrefixes() []string {
	var out []string
	for _, fp := range footprints {
		if r, ok := fp.(iptReader); ok {
			out = append(out, r.chainPrefixes()...)
		}
	}
	return out
}

// saveAll lists every table at once, the first time it is called.
func (f *iptView) saveAll(saver host.Saver) {
	if f.saved {
		return
	}
	f.saved = true
	if streamer, ok := f.ipt.(host.SaveStreamer); ok {
		f.streamAll(streamer) // parsed as it is read: a sweep holds one copy
		return
	}
	end := f.meter.Begin(hostwork.List, f.name()+"-save", true)
	tables, err := saver.SaveAll()
	lines, size := 0, 0
	for _, t := range tables {
		lines, size = lines+len(t), size+hostwork.LinesSize(t)
	}
	end(lines, size)
	if err != nil {
		f.errs.add(fmt.Errorf("%s: listing all tables: %w", f.name(), err))
		f.failed = true
	}
	for _, table := range sweptTables {
		f.listings[table] = iptables.ParseListing(tables[table], sweptChains[table]) // empty on error: nothing is deleted blind
	}
}

// hasChain reports whether chain exists: for a Teardown by asking a
// ChainProber first, so that only a chain that is there costs a listing.
// A chain there is confirmed by iptables itself: one it cannot read
// (written by another tool) is absent to it, and left alone.
func (f *iptView) hasChain(table, chain string) bool {
	prober, ok := f.ipt.(host.ChainProber)
	if f.whole || !ok {
		return f.listed(table, chain)
	}
	key := table + "/" + chain
	f.mu.Lock()
	exists, done := f.exists[key]
	f.mu.Unlock()
	if done {
		return exists
	}
	end := f.meter.Begin(hostwork.Probe, f.name()+" probe "+key, false)
	exists, err := prober.ProbeChain(table, chain)
	end(0, 0)
	if err != nil || exists {
		exists = f.listed(table, chain)
	}
	f.mu.Lock()
	if f.exists == nil {
		f.exists = map[string]bool{}
	}
	f.exists[key] = exists
	f.mu.Unlock()
	return exists
}

// anyChain reports whether one of chains exists. A jump needs its target,
// so where none of an attachment's chains exists no jump to them can,
// and the chain holding the jumps need not be listed at all.
func (f *iptView) anyChain(table string, chains []string) bool {
	for _, ch := range chains {
		if f.hasChain(table, ch) {
			return true
		}
	}
	return false
}

// mayMention reports whether a rule of chain may be about one of addrs
// without mentioning any of except (the attachment's own jump targets):
// an AddrScanner rules that out for a Teardown without a listing.
func (f *iptView) mayMention(table, chain string, addrs []netip.Addr, except []string) bool {
	if len(addrs) == 0 {
		return false
	}
	if f.whole {
		return true
	}
	if scanner, ok := f.ipt.(host.OtherAddrScanner); ok && len(except) > 0 {
		end := f.meter.Begin(hostwork.Probe, f.name()+" scan "+table+"/"+chain, false)
		may, err := scanner.MayMentionOther(table, chain, addrs, except)
		end(0, 0)
		return may || err != nil
	}
	if scanner, ok := f.ipt.(host.AddrScanner); ok {
		end := f.meter.Begin(hostwork.Probe, f.name()+" scan "+table+"/"+chain, false)
		may, err := scanner.MayMention(table, chain, addrs)
		end(0, 0)
		return may || err != nil
	}
	return true
}

// listShared lists the shared chains every run reads (a sweep: whole
// tables).
func (f *iptView) listShared() {
	for _, c := range sharedIPTChains {
		f.listing(c.table, c.chain)
	}
}

// listFailed reports whether a listing failed: its rules were judged on
// nothing, so they may still be there.
func (f *iptView) listFailed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// holdsListing reports whether anything is listed.
func (f *iptView) holdsListing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.listings) > 0
}

// dropHeads lets go of what the listings keep of chains whose rules they
// do not keep (iptables.Listing.DropHeads).
func (f *iptView) dropHeads() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.listings {
		l.DropHeads()
	}
}

// drop lets go of every listing: a sweep's are big, and a later run
// lists again.
func (f *iptView) drop() {
	nothing := f.sweepsNothing()
	f.mu.Lock()
	f.dropped.any, f.dropped.sweepsNothing = true, nothing
	f.listings, f.saved = nil, false
	f.mu.Unlock()
}

// sweepsNothing reports whether the listings held (or, when none is, the
// last ones dropped) hold nothing a sweep could remove. A workload set up
// since may have added rules; they are not its to judge.
func (f *iptView) sweepsNothing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.listings) == 0 {
		return f.dropped.any && f.dropped.sweepsNothing
	}
	for _, l := range f.listings {
		if l.Keep == nil || !l.SweepsNothing(isAttachmentChain) { // a chain listed alone says nothing of the others
			return false
		}
	}
	return !f.failed
}

// forget drops what was read of chain: a run that changed it reads it
// again.
func (f *iptView) forget(table, chain string) {
	f.mu.Lock()
	delete(f.listings, table+"/"+chain)
	delete(f.listings, table)
	f.saved = false
	f.mu.Unlock()
}

// streamAll lists every table cleanup reads from one streamed
// iptables-save, parsing each line as it comes.
func (f *iptView) streamAll(s host.SaveStreamer) {
	tables := sweptTables
	listings := map[string]*iptables.Listing{}
	for _, t := range tables {
		listings[t] = iptables.NewListing(sweptChains[t])
	}
	end := f.meter.Begin(hostwork.List, f.name()+"-save", true)
	lines, size := 0, 0
	err := s.SaveEach(tables, func(table string, line []byte) {
		lines, size = lines+1, size+len(line)+1
		listings[table].Add(line)
	})
	end(lines, size)
	if err != nil {
		f.errs.add(fmt.Errorf("%s: listing all tables: %w", f.name(), err))
		f.failed = true
		for _, t := range tables {
			listings[t] = iptables.NewListing(nil) // nothing is deleted blind
		}
	}
	for t, l := range listings {
		f.listings[t] = l
	}
}
