package footprint

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

func (bridgeIPT) perFamily()   {}
func (portmapIPT) perFamily()  {}
func (firewallIPT) perFamily() {}

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
