package footprint

import (
	"context"
	"errors"
	"net/netip"
	"slices"
)

// Network is what the cleaner must know about one CNI network: where its
// attachments' state is and which plugins write it (see FromConfList).
type Network struct {
	// Name is the conflist's network name.
	Name string
	// IfName is the interface the network's attachments have; libcni names
	// its cache files after it, and the bridge plugin's nftables
	// masquerade comments and the tuning plugin's files name it.
	IfName string
	// IfNames are further interface names the network's attachments may
	// have: a workload that joins several networks has one interface per
	// network (eth0, eth1, …).
	IfNames []string
	// IPAMDirs are host-local's reservation directories of the network,
	// already joined with Name.
	IPAMDirs []string
	// CacheDir is libcni's cache directory.
	CacheDir string
	// HostportNFT says the network's portmap uses its nftables backend,
	// whose DEL also removes other networks' rules of the same id.
	HostportNFT bool
	// Plugins are the network's conflist's plugins: the footprints read
	// what else they need from them (the firewall plugin's presence,
	// bandwidth's, tuning's data directories).
	Plugins []Plugin
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
	// Links opens the host namespace's network devices; nil: none are
	// looked at.
	Links func() (Links, error)
	// Networks is every network whose state may be on the host. Evidence
	// that another attachment holds an address is read from all of them:
	// reservations and cached results of one network say nothing about
	// another's.
	Networks []Network
}

// ErrIPTablesMissing says iptables (or ip6tables) could not be opened, so
// its state was not inspected.
var ErrIPTablesMissing = errors.New("iptables not available")

// Cleaner removes the footprint of attachments, by the ownership rule.
// Build one per call.
//
// For a Teardown (NewCleaner): Remember the ids before DEL, then Clean
// them; only what those attachments can own is read. For a GC
// (NewSweep): Remember the attachments libcni's GC may DEL, run it, then
// DiscoverAll and CleanAll the dead ones; whole tables are listed and
// shared by all, one IP family's at a time (see sweep.go).
type Cleaner struct {
	ctx   context.Context
	host  Host
	nets  map[string]Network
	net   string // NewCleaner's network
	whole bool   // a sweep: whole tables are listed, every file read

	prior   hostFiles
	guarded []guarded
	swept   *view // DiscoverAll's whole view, reused by CleanAll
	rep     Report

	// Live says whether the holder of something a DEL took still lives
	// (nil: all do); what a DEL took from an attachment that is being or
	// has been torn down is never added back.
	Live func(Attachment) bool
	// WholeWorkload says the ids are dead everywhere (a GC: they are not
	// live, on any network), so what a DEL takes from the ids' other
	// attachments is not guarded: none of it would be added back. A
	// Teardown cannot say so: the same id may be attached to a network
	// this Configurator does not know, by another.
	WholeWorkload bool
}

// NewCleaner returns a cleaner of network n's attachments on host h; ctx
// bounds everything it runs.
func NewCleaner(ctx context.Context, n Network, h Host) *Cleaner {
	c := NewSweep(ctx, h)
	c.nets[n.Name], c.net, c.whole = n, n.Name, false
	return c
}

// NewSweep returns a cleaner of attachments of every network in
// h.Networks.
func NewSweep(ctx context.Context, h Host) *Cleaner {
	nets := make(map[string]Network, len(h.Networks))
	for _, n := range h.Networks {
		nets[n.Name] = n
	}
	return &Cleaner{ctx: ctx, host: h, nets: nets, whole: true}
}

// Remember reads what ids' files say before DEL erases it (a DEL without
// a cached result cannot tell the firewall plugin which address to clean,
// but host-local's reservation still tells the cleaner), and records what
// the DEL would wrongly take from other attachments. An error says that
// could not be read, so the DEL may harm a neighbour unseen. A missing
// iptables is none: the plugins cannot change what is not there.
func (c *Cleaner) Remember(ids []string) error { return c.RememberAll(c.attachments(ids)) }

// RememberAll is Remember for attachments of any known network.
func (c *Cleaner) RememberAll(atts []Attachment) error {
	errs := &errList{}
	set := c.set(atts)
	v := newView(c.ctx, c.host, c.nets, c.whole, errs)
	if c.whole { // many attachments: reading everything once is cheapest
		v.files = scanAllFiles(v)
		v.prior = v.files.of(set)
	} else {
		v.prior = scanFilesOf(v, set)
	}
	c.prior = v.prior
	v.wholeWorkload = c.WholeWorkload
	v.nft.brief = c.whole && c.WholeWorkload // guards nothing of the ids: no rule is added back
	var addrs []netip.Addr
	for _, fp := range footprints {
		if g, ok := fp.(guarding); ok {
			addrs = append(addrs, g.guardAddrs(v, set)...)
		}
	}
	if len(addrs) == 0 && !v.nft.broken {
		return errs.errExcept(ErrIPTablesMissing)
	}
	ev := newEvidence() // a guard needs only who else holds the addresses
	askHolders(v, set, ev, addrs)
	for _, fp := range footprints {
		if g, ok := fp.(guarding); ok {
			c.guarded = append(c.guarded, g.guard(v, set, ev)...)
		}
	}
	return errs.errExcept(ErrIPTablesMissing)
}

// Discover scans the whole host for the network's attachments and returns
// their ids, sorted. Clean then reuses the scan.
func (c *Cleaner) Discover() ([]string, error) {
	var ids []string
	atts, err := c.DiscoverAll()
	for _, a := range atts {
		if a.Network == c.net {
			ids = append(ids, a.ID)
		}
	}
	return ids, err
}

// DiscoverAll scans the whole host for the attachments of every known
// network: reservation and cache files, rule comments, masquerade chains
// whose jump is gone, tuning files. CleanAll then reuses the scan.
func (c *Cleaner) DiscoverAll() ([]Attachment, error) {
	errs := &errList{}
	v := newView(c.ctx, c.host, c.nets, true, errs)
	v.prior = c.prior
	// With WholeWorkload nothing was guarded (RememberAll), so nothing
	// this view lists is compared with a rule to add back.
	v.nft.brief = c.WholeWorkload
	found := attSet{}
	v.byFamily(func(f *iptView, last bool) {
		if !last { // searched and dropped: a sweep holds one family at a time
			f.listShared()
			v.discover(found, true)
			f.drop()
			return
		}
		readTablesFirst(v)
		v.files = scanAllFiles(v)
		v.discover(found, false)
	})
	c.swept = v
	return found.sorted(), errs.err()
}

// readTablesFirst lists the rules before the files are read. An
// attachment reserves its address before its plugins write a rule for it,
// so a workload set up meanwhile whose rules the listing shows has its
// reservation in the files: its address is held, never judged dead.
func readTablesFirst(v *view) {
	for _, f := range v.families() {
		f.listShared()
	}
	v.nft.list()
}

// Clean removes everything of ids that the ownership rule attributes to
// them, adds back what their DEL took from others, and returns what it
// removed. All evidence is gathered before anything changes; every step
// runs even when another fails, and the error joins each failure.
func (c *Cleaner) Clean(ids []string) ([]Item, error) {
	err := c.CleanAll(c.attachments(ids))
	return c.rep.Removed(), err
}

// CleanAll is Clean for attachments of any known network; Report says
// what it removed.
func (c *Cleaner) CleanAll(atts []Attachment) error {
	set := c.set(atts)
	gs := c.liveGuarded(set)
	extra := make([]netip.Addr, len(gs))
	for i, g := range gs {
		extra[i] = g.addr
	}
	if v := c.swept; v != nil {
		c.swept = nil // the listings are no longer needed: a sweep's are big
		if len(set) > 0 || len(gs) > 0 {
			c.sweep(v, set, gs, extra)
		}
		return v.errs.err()
	}
	v := newView(c.ctx, c.host, c.nets, false, &errList{})
	v.prior, v.files = c.prior, c.prior.still(set)
	ev := newEvidence()
	gatherInto(v, set, extra, ev)
	c.run(v, set, gs, ev, nil, nil)
	return v.errs.err()
}

// run plans on the evidence and applies; only footprints with plans (nil:
// all) plan. planned (if any) is called in between.
func (c *Cleaner) run(v *view, set attSet, gs []guarded, ev *evidence, plans func(footprint) bool, planned func()) {
	c.rep.reserve(len(set))
	p := plan{atts: &c.rep}
	for _, fp := range footprints {
		if plans != nil && !plans(fp) {
			continue
		}
		fp.plan(v, set, ev, &p)
		if g, ok := fp.(guarding); ok {
			g.restore(v, set, ev, gs, c.live(set), &p)
		}
	}
	if planned != nil {
		planned()
	}
	apply(v, &p, &c.rep)
}

// Report returns what was removed and added back so far, compact: a
// sweep can remove hundreds of thousands of pieces.
func (c *Cleaner) Report() *Report { return &c.rep }

// Removed returns what was removed so far.
func (c *Cleaner) Removed() []Item { return c.rep.Removed() }

// Restored returns the other attachments' rules that were added back
// after a DEL had removed them.
func (c *Cleaner) Restored() []Item { return c.rep.Restored() }

// liveGuarded returns the guarded items one of whose holders is outside
// set and still lives.
func (c *Cleaner) liveGuarded(set attSet) []guarded {
	var out []guarded
	for _, g := range c.guarded {
		if slices.ContainsFunc(g.holders, c.live(set)) {
			out = append(out, g)
		}
	}
	return out
}

// live returns whether an attachment outside set lives, by Live.
func (c *Cleaner) live(set attSet) func(Attachment) bool {
	return func(a Attachment) bool { return !set[a] && (c.Live == nil || c.Live(a)) }
}

func (c *Cleaner) attachments(ids []string) []Attachment {
	atts := make([]Attachment, len(ids))
	for i, id := range ids {
		atts[i] = Attachment{c.net, id}
	}
	return atts
}

func (c *Cleaner) set(atts []Attachment) attSet {
	set := make(attSet, len(atts))
	for _, a := range atts {
		if _, ok := c.nets[a.Network]; !ok {
			c.nets[a.Network] = Network{Name: a.Network}
		}
		set[a] = true
	}
	return set
}
