package footprint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Network is what the cleaner must know about one CNI network.
type Network struct {
	// Name is the conflist's network name.
	Name string
	// IfName is the interface the network's attachments have; libcni names
	// its cache files after it, and the bridge plugin's nftables
	// masquerade comments name it.
	IfName string
	// IfNames are further interface names the network's attachments may
	// have: a workload that joins several networks has one interface per
	// network (eth0, eth1, …), so one network's attachments can have
	// different names. Cache files and masquerade comments under any of
	// them are recognised as well as under IfName.
	IfNames []string
	// IPAMDirs are host-local's reservation directories of the network,
	// already joined with Name.
	IPAMDirs []string
	// CacheDir is libcni's cache directory.
	CacheDir string
	// HostportNFT says the network's portmap uses its nftables backend,
	// whose DEL also removes other networks' rules of the same id (see
	// GuardHostports).
	HostportNFT bool
}

// ifNames returns IfName and IfNames, each once.
func (n Network) ifNames() []string {
	names := make([]string, 0, 1+len(n.IfNames))
	for _, name := range append([]string{n.IfName}, n.IfNames...) {
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

// Host is how the cleaner reaches the host; tests replace each seam.
type Host struct {
	// IPTables opens iptables (ipv6 false) or ip6tables.
	IPTables func(ipv6 bool) (IPTables, error)
	// NFTables opens nftables; ErrNFTablesMissing (or a nil func) means
	// the host has none, which is no failure.
	NFTables func() (NFTables, error)
}

// Kind says what kind of host state an Item was.
type Kind string

// The kinds of state a Cleaner removes.
const (
	KindRule         Kind = "iptables rule"
	KindChain        Kind = "iptables chain"
	KindReservation  Kind = "ip reservation"
	KindCachedResult Kind = "cached result"
)

// Item is one piece of host state that was removed.
type Item struct {
	Kind   Kind
	ID     string // the container id that owned it
	Detail string // the rule, chain or file
}

// ErrIPTablesMissing says iptables (or ip6tables) could not be opened, so
// its state was not inspected.
var ErrIPTablesMissing = errors.New("iptables not available")

// Cleaner removes the footprint of attachments of one network. Build one
// per call: it reads every listing and file once and keeps what it read.
//
// For a Teardown: Remember the ids before DEL, then Clean them; only what
// those ids can own is looked at. For a GC: Discover, then Clean the ids
// found dead; whole tables are listed once and shared by all ids.
type Cleaner struct {
	ctx   context.Context
	net   Network
	host  Host
	whole bool // listings cover whole tables (Discover) instead of what ids can own

	files    hostFiles // what the files say now
	prior    hostFiles // what they said before DEL (Remember)
	families [2]*family
	nft      *nftScan
	guarded  []NFTRule // hostport rules as they were before DEL
	restored []Item

	mu      sync.Mutex
	removed []Item
	errs    []error
}

// NewCleaner returns a cleaner of network n on host h; ctx bounds the
// commands it runs.
func NewCleaner(ctx context.Context, n Network, h Host) *Cleaner {
	return &Cleaner{ctx: ctx, net: n, host: h}
}

// Remember reads what the files say about ids before DEL erases it: a DEL
// without a cached result cannot tell the firewall plugin which address to
// clean, but host-local's reservation still can tell the cleaner.
func (c *Cleaner) Remember(ids []string) {
	c.prior = c.scanFilesOf(newIDSet(ids))
	c.GuardHostports(ids)
}

// Discover scans the whole host for the network's attachments and returns
// the ids it found, sorted: in reservation and cache files, rule comments,
// and masquerade chains whose jump is gone. Clean then reuses the scan.
func (c *Cleaner) Discover() []string {
	c.whole = true
	c.files = c.scanAllFiles()
	found := newIDSet(c.files.ids())
	for _, id := range c.scanNFT(nil).discover(c) {
		found[id] = true
	}
	var mu sync.Mutex
	c.forEachFamily(func(f *family) {
		ids := f.discover()
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			found[id] = true
		}
	})
	return sortedIDs(found)
}

// Clean removes everything of ids that the ownership rule attributes to
// them, in iptables and ip6tables, nftables, host-local and libcni's
// cache, and returns what it removed. All evidence is gathered before
// anything is deleted; every step runs even when another fails, and the
// error joins each failure.
func (c *Cleaner) Clean(ids []string) ([]Item, error) {
	set := newIDSet(ids)
	if !c.whole {
		c.files = c.prior.refresh(set)
	}
	nft := c.scanNFT(set)
	evs := [2]*evidence{c.evidence(set, false), c.evidence(set, true)}
	for i, ev := range evs {
		nft.prove(c, set, ev, i == 1)
	}
	c.forEachFamily(func(f *family) {
		ev := evs[b2i(f.v6)]
		f.proveMasquerade(set, ev)
		f.apply(f.plan(set, ev))
	})
	if nft.nft != nil {
		nft.apply(c, set, nft.plan(c, set, evs))
		c.restoreHostports(set, evs)
	}
	if !c.cutShort() {
		c.removeFiles(set)
	}
	return c.Removed(), c.err()
}

// Removed returns what was removed so far.
func (c *Cleaner) Removed() []Item {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Item(nil), c.removed...)
}

func (c *Cleaner) noteRemoved(kind Kind, id, detail string) {
	c.mu.Lock()
	c.removed = append(c.removed, Item{Kind: kind, ID: id, Detail: detail})
	c.mu.Unlock()
}

func (c *Cleaner) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *Cleaner) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(c.errs...)
}

// forEachFamily runs fn for iptables and ip6tables in parallel: the two
// share nothing, and each listing costs a process.
func (c *Cleaner) forEachFamily(fn func(*family)) {
	var wg sync.WaitGroup
	for i, v6 := range []bool{false, true} {
		if c.families[i] == nil {
			ipt, err := c.host.IPTables(v6)
			if err != nil {
				c.fail(fmt.Errorf("%s: %w: %w", familyName(v6), ErrIPTablesMissing, err))
				continue
			}
			c.families[i] = &family{ipt: bindContext(c.ctx, ipt), v6: v6, c: c}
		}
		wg.Add(1)
		go func(f *family) {
			defer wg.Done()
			fn(f)
		}(c.families[i])
	}
	wg.Wait()
}

// removeFiles removes the reservations and cached results of ids.
func (c *Cleaner) removeFiles(ids idSet) {
	byDir := map[string][]reservation{}
	for _, r := range c.files.reservations {
		if ids[r.id] {
			byDir[r.dir] = append(byDir[r.dir], r)
		}
	}
	for dir, rs := range byDir {
		c.removeReservations(dir, rs)
	}
	for _, r := range c.files.cached {
		if ids[r.id] {
			c.removeCachedResult(r)
		}
	}
}

func familyName(v6 bool) string {
	if v6 {
		return "ip6tables"
	}
	return "iptables"
}

func sortedIDs(s idSet) []string {
	ids := make([]string, 0, len(s))
	for id := range s {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
