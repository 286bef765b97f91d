package footprint

import (
	"context"
	"net/netip"
	"slices"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/hostwork"
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
	// NoIPTables says none of the network's plugins uses iptables on this
	// host (nftables backends, no firewall plugin): a cleanup that cannot
	// run iptables is complete all the same.
	NoIPTables bool
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

// Seams is how the cleaner reaches the host; tests replace each seam.
type Seams struct {
	// IPTables opens iptables (ipv6 false) or ip6tables.
	IPTables func(ipv6 bool) (host.IPTables, error)
	// NFTables opens nftables; ErrNFTablesMissing (or a nil func) means
	// the host has none, which is no failure.
	NFTables func() (host.NFTables, error)
	// Links opens the host namespace's network devices; nil: none are
	// looked at.
	Links func() (host.Links, error)
	// Proofs keeps, durably, the addresses attachments held, before a DEL
	// erases the files that prove them: the host registry. nil: intent
	// records under each network's CacheDir (withheld.go), as cninet
	// kept them before it had a registry.
	Proofs ProofStore
	// Records says which attachments the host registry records as
	// attached (or being added) with which addresses: each holds its
	// addresses, even where every file and rule that would say so is
	// gone (a drift). nil: the registry is not asked.
	Records RecordedHolders
	// Networks is every network whose state may be on the host. Evidence
	// that another attachment holds an address is read from all of them:
	// reservations and cached results of one network say nothing about
	// another's.
	Networks []Network
}

// ProofStore is where the proof of an attachment's addresses outlives a
// DEL: Prevent records there every address the attachment's files prove
// before the DEL erases them, and every run reads it back as proof, so a
// process killed after the DEL loses nothing.
type ProofStore interface {
	// Recorded returns the addresses att provably held, as recorded.
	Recorded(att Attachment) []netip.Addr
	// Record adds addrs to what is recorded for att, durably, before it
	// returns.
	Record(att Attachment, addrs []netip.Addr) error
}

// RecordedHolders is the host registry as the ownership rule asks it.
type RecordedHolders interface {
	// Holding returns, for each of addrs, the attachments the registry
	// records as attached or being added with that address.
	Holding(addrs []netip.Addr) map[netip.Addr][]Attachment
}

// Cleaner removes the footprint of attachments, by the ownership rule.
// Build one per call.
//
// For a Teardown (NewCleaner): Prevent before the DEL (prevent.go, with
// how the detach is made: Cleaner.Detach), run the DEL as Prevent says
// (Prevention.Filter), then Clean the ids; only what those
// attachments can own is read. For a GC (NewSweep): PreventAll for the
// attachments libcni's GC may DEL, run it, then DiscoverAll and CleanAll
// the dead ones; whole tables are listed and shared by all, one IP
// family's at a time (see sweep.go).
type Cleaner struct {
	ctx   context.Context
	host  Seams
	nets  map[string]Network
	net   string // NewCleaner's network
	whole bool   // a sweep: whole tables are listed, every file read

	prior hostFiles       // what Prevent read: the proof the DEL erases
	meter *hostwork.Meter // what its reads and writes took (TakeSpent)
	swept *view           // DiscoverAll's whole view, reused by CleanAll
	rep   Report

	// WholeWorkload says the ids are dead everywhere (a GC: they are not
	// live, on any network), so a DEL may take what the ids' other
	// attachments have: portmap's nftables DEL is never left out. A
	// Teardown cannot say so: the same id may be attached to a network
	// this Configurator does not know, by another.
	WholeWorkload bool
	// DryRun plans and reports what a run would remove, and changes
	// nothing: Report lists the planned items.
	DryRun bool
	// RecheckByHandle lets Clean look up by handle the nftables rules of
	// the set's own that Prevent saw, instead of reading the plugins'
	// tables again (see nftseen.go). Set it only where no plugin of the
	// set can still be writing: a Teardown or Disconnect of attachments
	// whose ADD returned, not a Setup's rollback.
	RecheckByHandle bool
	seen            *seenRules // what Prevent saw, for Clean
	// Detach is how the detach Prevent runs before is made: what it
	// leaves out of the DEL besides what the host requires (prevent.go).
	// The zero value: one attachment, whose workload keeps nothing else.
	Detach Detach
}

// NewCleaner returns a cleaner of network n's attachments on host h; ctx
// bounds everything it runs.
func NewCleaner(ctx context.Context, n Network, h Seams) *Cleaner {
	c := NewSweep(ctx, h)
	c.nets[n.Name], c.net, c.whole = n, n.Name, false
	return c
}

// NewSweep returns a cleaner of attachments of every network in
// h.Networks.
func NewSweep(ctx context.Context, h Seams) *Cleaner {
	nets := make(map[string]Network, len(h.Networks))
	for _, n := range h.Networks {
		nets[n.Name] = n
	}
	return &Cleaner{ctx: ctx, host: h, nets: nets, whole: true, meter: &hostwork.Meter{}}
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
	v := newView(c.ctx, c.host, c.nets, true, errs, c.meter)
	v.prior = c.prior
	v.nft.brief = c.WholeWorkload // no rule of a dead id's is judged by its expressions
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
// them, and returns what it removed. All evidence is gathered before anything changes; every step
// runs even when another fails, and the error joins each failure.
func (c *Cleaner) Clean(ids []string) ([]Item, error) {
	err := c.CleanAll(c.attachments(ids))
	return c.rep.Removed(), err
}

// CleanAll is Clean for attachments of any known network; Report says
// what it removed.
func (c *Cleaner) CleanAll(atts []Attachment) error {
	set := c.set(atts)
	if v := c.swept; v != nil {
		c.swept = nil // the listings are no longer needed: a sweep's are big
		if len(set) > 0 {
			c.sweep(v, set)
		}
		return v.errs.err()
	}
	v := newView(c.ctx, c.host, c.nets, false, &errList{}, c.meter)
	v.prior, v.files = c.prior, c.prior.still(set)
	if c.RecheckByHandle {
		v.nft.seen = c.seen
	}
	ev := newEvidence()
	gatherInto(v, set, ev)
	c.run(v, set, ev, nil, nil)
	return c.errOf(v, set)
}

// errOf is the run's error. Without iptables, the run is complete where
// no network of the set has a plugin that uses it.
func (c *Cleaner) errOf(v *view, set attSet) error {
	for a := range set {
		if !c.nets[a.Network].NoIPTables {
			return v.errs.err()
		}
	}
	return v.errs.errExcept(host.ErrIPTablesMissing)
}

// run plans on the evidence and applies; only footprints with plans (nil:
// all) plan. planned (if any) is called in between.
func (c *Cleaner) run(v *view, set attSet, ev *evidence, plans func(footprint) bool, planned func()) {
	c.rep.reserve(len(set))
	p := plan{atts: &c.rep}
	for _, fp := range footprints {
		if plans != nil && !plans(fp) {
			continue
		}
		fp.plan(v, set, ev, &p)
	}
	if c.DryRun {
		notePlanned(v, &p, &c.rep)
	}
	if planned != nil {
		planned()
	}
	if !c.DryRun {
		apply(v, &p, &c.rep)
	}
}

// TakeSpent returns what the cleaner spent on the host since it was
// made or TakeSpent was last called: call it after Prevent, and again
// after Clean, for each phase's.
func (c *Cleaner) TakeSpent() hostwork.Spent { return c.meter.Take() }

// Report returns what was removed so far, compact: a sweep can remove
// hundreds of thousands of pieces.
func (c *Cleaner) Report() *Report { return &c.rep }

// Removed returns what was removed so far.
func (c *Cleaner) Removed() []Item { return c.rep.Removed() }

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

// A sweep (DiscoverAll, then CleanAll) holds one IP family's iptables
// listings at a time: at ten thousand attachments each family's shared
// chains hold forty thousand rules, and holding both at once doubles
// what the sweep keeps. DiscoverAll lists each family but the last,
// searches it and drops it; it keeps the last one's listings with the
// nftables listing and the files read after them. CleanAll cleans that
// family first, then lists each other family again, and reads the files
// again after it, so that a listing is never newer than the files it is
// judged with (readTablesFirst).
//
// Evidence is kept from pass to pass: an iptables listing proves and
// holds addresses of its own family only, and the nftables listing and
// the files are read in every pass. The footprints that plan iptables
// changes (perFamily) plan in each family's pass, on the family it
// holds; every other one plans once, in a last pass that holds no
// iptables listing, with all the evidence.

// perFamily is a footprint whose plan and discovery touch only the
// iptables of the families its view holds.
type perFamily interface{ perFamily() }

func isPerFamily(fp footprint) bool {
	_, ok := fp.(perFamily)
	return ok
}

// byFamily calls pass with each iptables family in turn, the view
// narrowed to it; last is true for the last one (and for a nil family
// when the host has no iptables). A family already listed goes first.
func (v *view) byFamily(pass func(f *iptView, last bool)) {
	all := v.ipt
	defer func() { v.ipt = all }()
	order := v.families()
	for i, f := range order {
		if f.holdsListing() && i > 0 {
			order[0], order[i] = order[i], order[0]
		}
	}
	if len(order) == 0 {
		order = []*iptView{nil}
	}
	for i, f := range order {
		v.ipt = [2]*iptView{}
		if f != nil {
			v.ipt[b2i(f.v6)] = f
		}
		pass(f, i == len(order)-1)
	}
}

// discover adds what the footprints find in the view (only the perFamily
// ones with onlyIPT).
func (v *view) discover(found attSet, onlyIPT bool) {
	for _, fp := range footprints {
		if !onlyIPT || isPerFamily(fp) {
			fp.discover(v, found)
		}
	}
}

// sweep cleans the set on DiscoverAll's view: each family's iptables in a
// pass of its own, then the rest (nftables, files, devices) with no
// iptables listing held; the files go after every rule they prove. What
// a pass no longer reads once it has planned is let go before it
// applies: of the listing, the chains it does not delete rule by rule;
// the files, which the last pass reads again.
func (c *Cleaner) sweep(v *view, set attSet) {
	ev, filesDropped := newEvidence(), false
	v.byFamily(func(f *iptView, _ bool) {
		switch {
		case f == nil, cutShort(v.errs.err()): // a held lock would only be waited for again
			return
		case f.sweepsNothing(): // as DiscoverAll found it: no pass, no listing again
			return
		case !f.holdsListing() || filesDropped:
			f.listShared()
			v.files = scanAllFiles(v) // read after the listing, as readTablesFirst does
		}
		gatherInto(v, set, ev)
		c.run(v, set, ev, isPerFamily, func() {
			f.dropHeads()
			v.files, filesDropped = hostFiles{}, true
		})
		f.drop()
	})
	all := v.ipt
	v.ipt = [2]*iptView{}
	if filesDropped {
		v.files = scanAllFiles(v) // newer than every listing: it may only show more holders
	}
	gatherInto(v, set, ev)
	c.run(v, set, ev, func(fp footprint) bool { return !isPerFamily(fp) }, func() { v.files = hostFiles{} })
	v.ipt = all
}
