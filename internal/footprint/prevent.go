package footprint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/seed1280861d/cninet/host"
)

// The prevention rule. Some plugins' DEL deletes by something other than
// the attachment's own identity: the firewall plugin by the addresses of
// the cached result libcni hands it as prevResult (stale after a reboot
// that kept libcni's cache but not host-local's reservations: a live
// workload may hold them now), portmap's nftables backend by the bare
// container id, on every network. No such DEL is ever run as it is.
// Before it, Prevent decides what the DEL may see, and makes it so:
//
//   - the cached result keeps only the addresses the attachment provably
//     still owns: on a network with host-local IPAM, those reserved for
//     it (the reservation stands until the IPAM plugin's DEL, which runs
//     after the firewall plugin's, so nobody can take the address
//     meanwhile), and in every case none that another attachment holds
//     now. The rest is withheld: written to an intent record first
//     (withheld.go), then taken out of the cached result, each write
//     atomic, so a process killed at any point leaves a state the next
//     Teardown or GC finishes. The force cleanup removes their rules by
//     the ownership rule;
//   - portmap is left out of the DEL chain (Prevention.Omit) when its
//     nftables backend would find rules of the same id that are not the
//     attachment's: the force cleanup removes exactly the attachment's,
//     proven by address;
//   - how the detach is made (Cleaner.Detach) leaves out more: portmap
//     while the workload keeps other attachments, the loopback plugin
//     while lo is up, and runs portmap's DEL first for a whole workload
//     (below).
//
// Nothing a DEL removes is therefore ever another attachment's, at any
// instant, whatever process dies when; nothing is added back.

// Prevention is what the DEL of the attachments may be handed, decided
// and made so by Prevent (one network's) or Detach.PreventWorkload (the
// whole detach's, before).
type Prevention struct {
	// Omit are the plugin types to leave out of the network's DEL chain:
	// their DEL would reach another attachment's state.
	Omit []string
	// OmitLoopback says the loopback plugin is left out too: its DEL only
	// sets lo down, which the workload still uses (Detach.LoopbackUp).
	OmitLoopback bool
	// Withheld are the addresses taken out of each attachment's cached
	// result: the DEL does not see them, the force cleanup removes their
	// rules where the attachment owns them.
	Withheld map[Attachment][]netip.Addr
	// HostportsFirst, for a whole workload leaving several networks, is
	// the attachment on whose network portmap's nftables DEL runs alone
	// (HostportsAlone), once, before every network's own DEL; nil: none.
	HostportsFirst *Leaving
	// Hostports is what the host answered, where the decision asked it,
	// about portmap's DEL reaching only the leaving attachments' rules.
	Hostports HostportCheck
}

// Filter is the DEL chain p leaves: without Omit, and without the
// loopback plugin where OmitLoopback.
func (p Prevention) Filter() PluginFilter {
	if !p.OmitLoopback {
		return Without(p.Omit...)
	}
	return Without(append(slices.Clip(p.Omit), "loopback")...)
}

// preventing is a footprint whose plugin's DEL deletes by something other
// than the attachment's own identity: prevent decides, before the DEL,
// what of the DEL's input must change so that it cannot reach another
// attachment's state.
type preventing interface {
	prevent(v *view, set attSet, pv *prevention)
}

// prevention collects what the preventing footprints decide.
type prevention struct {
	omit     []string
	withhold map[string]*withholding // by cached result path
}

// withholding is what to take out of one cached result.
type withholding struct {
	att   Attachment
	cache cachedResult
	addrs addrSet
}

func (pv *prevention) omitPlugin(typ string) {
	if !slices.Contains(pv.omit, typ) {
		pv.omit = append(pv.omit, typ)
	}
}

func (pv *prevention) withholdAddr(c cachedResult, a netip.Addr) {
	if pv.withhold == nil {
		pv.withhold = map[string]*withholding{}
	}
	w := pv.withhold[c.path]
	if w == nil {
		w = &withholding{att: c.att(), cache: c, addrs: addrSet{}}
		pv.withhold[c.path] = w
	}
	w.addrs[a] = true
}

// Prevent makes ids' DEL on the cleaner's network unable to reach another
// attachment's state (see Prevention), as the host and the detach
// (Cleaner.Detach) require, and reads what the DEL will erase: the
// attachments' files, the proof of their addresses for Clean. An error
// says either could not be done: the DEL must not run (Clean still may).
// A missing iptables is no error: the plugins cannot change what is not
// there.
func (c *Cleaner) Prevent(ids []string) (Prevention, error) {
	atts := c.attachments(ids)
	p, err := c.PreventAll(atts)
	if err != nil {
		return p, err
	}
	n := c.nets[c.net]
	for _, att := range atts {
		c.Detach.decide(att, n, &p, c.hostportReach)
	}
	return p, nil
}

// hostportReach asks the host, as the decision does (hostportReach),
// on a view of its own that records no proof.
func (c *Cleaner) hostportReach(first Network, atts []Attachment) (bool, error) {
	h := c.host
	h.Proofs = nil
	sub := NewCleaner(c.ctx, first, h)
	sub.meter = c.meter // its reads are the prevention's
	return sub.hostportDELReachesOnly(atts)
}

// PreventAll is Prevent for attachments of any known network (a GC,
// before libcni's GC DELs the stale ones).
func (c *Cleaner) PreventAll(atts []Attachment) (Prevention, error) {
	errs := &errList{}
	set := c.set(atts)
	v := newView(c.ctx, c.host, c.nets, c.whole, errs, c.meter)
	if c.whole { // many attachments: reading everything once is cheapest
		v.files = scanAllFiles(v)
		v.prior = v.files.of(set)
		for _, dir := range cacheDirs(c.nets) {
			removeStaleTemps(dir)
		}
	} else {
		v.prior = scanFilesOf(v, set)
	}
	c.prior = v.prior
	if err := c.recordProof(set); err != nil {
		return Prevention{}, err
	}
	v.wholeWorkload = c.WholeWorkload
	v.nft.brief = c.whole && c.WholeWorkload
	v.nft.keepSeen = c.RecheckByHandle && !c.whole
	pv := &prevention{}
	for _, fp := range footprints {
		if p, ok := fp.(preventing); ok {
			p.prevent(v, set, pv)
		}
	}
	if err := errs.errExcept(host.ErrIPTablesMissing); err != nil {
		return Prevention{}, err
	}
	if c.RecheckByHandle && !c.whole {
		c.seen = v.nft.seen
	}
	out := Prevention{Omit: pv.omit}
	var werrs []error
	for _, path := range sortedKeys(pv.withhold) {
		w := pv.withhold[path]
		if err := c.withhold(w); err != nil {
			werrs = append(werrs, err)
			continue
		}
		if out.Withheld == nil {
			out.Withheld = map[Attachment][]netip.Addr{}
		}
		out.Withheld[w.att] = append(out.Withheld[w.att], sortedAddrs(w.addrs)...)
	}
	return out, errors.Join(werrs...)
}

// recordProof records, before any DEL, every address the set's files
// prove (c.prior) in the proof store: the DEL erases those files, and a
// process killed after it must not lose the proof. Without a store the
// intent records of withhold keep what the DEL is not shown.
func (c *Cleaner) recordProof(set attSet) error {
	if c.host.Proofs == nil {
		return nil
	}
	byAtt := c.prior.addrsByAttachment(set)
	var errs []error
	for _, att := range set.sorted() {
		if addrs := byAtt[att]; len(addrs) > 0 {
			if err := c.host.Proofs.Record(att, uniqueAddrs(addrs)); err != nil {
				errs = append(errs, fmt.Errorf("recording the proof of %s before its DEL: %w", att, err))
			}
		}
	}
	return errors.Join(errs...)
}

// withhold writes the intent record (where no proof store recorded the
// addresses already), then takes the addresses out of the cached result;
// the record is also kept as proof for Clean.
func (c *Cleaner) withhold(w *withholding) error {
	addrs := sortedAddrs(w.addrs)
	cacheDir := c.nets[w.att.Network].CacheDir
	if c.host.Proofs != nil {
		if err := withholdFromCache(cacheDir, w.cache.path, w.addrs); err != nil {
			return fmt.Errorf("withholding %v from the DEL of %s: %w", addrs, w.att, err)
		}
		return nil
	}
	if err := writeRecord(cacheDir, w.att, w.cache.ifName, addrs); err != nil {
		return fmt.Errorf("withholding %v from the DEL of %s: %w", addrs, w.att, err)
	}
	c.prior.records = append(c.prior.records, intentRecord{net: w.att.Network, id: w.att.ID, ifName: w.cache.ifName,
		path: recordPath(cacheDir, w.att.Network, w.att.ID), addrs: addrs})
	if err := withholdFromCache(cacheDir, w.cache.path, w.addrs); err != nil {
		return fmt.Errorf("withholding %v from the DEL of %s: %w", addrs, w.att, err)
	}
	return nil
}

// hostportDELReachesOnly reports whether portmap's nftables DEL of the
// attachments' ids, which deletes every hostport rule carrying one of
// them on every network, would reach only rules of the attachments
// themselves: no rule of those ids carries an address none of them held
// (the decision below asks it). An error says the rules could not be read: the
// answer is no.
func (c *Cleaner) hostportDELReachesOnly(atts []Attachment) (bool, error) {
	errs := &errList{}
	set := c.set(atts)
	v := newView(c.ctx, c.host, c.nets, false, errs, c.meter)
	v.prior = scanFilesOf(v, set)
	foreign := foreignIDRules(v, set)
	if err := errs.errExcept(host.ErrIPTablesMissing); err != nil {
		return false, err
	}
	return len(foreign) == 0, nil
}

// cacheDirs returns the cache directories of nets, each once.
func cacheDirs(nets map[string]Network) []string {
	var dirs []string
	for _, n := range sortedNets(nets) {
		if n.CacheDir != "" && !slices.Contains(dirs, n.CacheDir) {
			dirs = append(dirs, n.CacheDir)
		}
	}
	return dirs
}

// What a DEL may touch depends, besides what the host holds (above),
// on how the detach is made. Here it is decided, in one place:
//
//   - portmap's nftables DEL deletes every hostport rule of the bare
//     container id, on every network. While the workload keeps other
//     attachments (the detach is alongside them), portmap is left out of
//     each network's DEL, unless the caller named the attachment exactly
//     and the host holds only its hostport rules of the id;
//   - a whole workload leaving several networks runs that DEL once, for
//     all of them, before any network's own DEL, where the host holds
//     only the leaving attachments' hostport rules of the id
//     (Detach.PreventWorkload): one is all it needs, and two at once make
//     one fail halfway;
//   - the loopback plugin's DEL only sets lo down: where lo was up and the
//     workload keeps other networks, it is left out, unless the DEL runs
//     whole chains only (an injected Config.CNI: its caller sets lo up
//     again after).

// Detach is how a detach of a workload's attachments is made: with what
// the host holds, it decides what each DEL may run (Cleaner.Detach,
// Detach.PreventWorkload). The zero value is a detach of one attachment
// whose workload keeps nothing else.
type Detach struct {
	// Leaving are the attachments the detach takes, one per network.
	Leaving []Leaving
	// Others says the workload keeps attachments besides Leaving: a
	// Disconnect, a Connect rolled back, a GC that spares some networks.
	Others bool
	// Exact says the caller named the one attachment detached
	// (Disconnect with an interface name, a runtime's DEL): others may
	// exist unseen, yet portmap's DEL runs when the host shows its
	// hostport rules are this attachment's alone.
	Exact bool
	// LoopbackUp says the workload's lo was up before the detach, which
	// leaves it other networks: the loopback plugin's DEL, which sets lo
	// down, would cut the workload's own localhost traffic.
	LoopbackUp bool
}

// Leaving is one attachment a Detach takes, as its DEL would run.
type Leaving struct {
	// Network is the attachment's network as its DEL runs it: its
	// conflist's plugins, its interface (IfName).
	Network Network
	// ID is the container id.
	ID string
	// PortMappings says the DEL hands portmap port mappings (the network
	// declares the capability and the workload has some): without them,
	// portmap's DEL removes nothing.
	PortMappings bool
	// WholeChain says the network's DEL runs its whole chain only (an
	// injected Config.CNI): a plugin left out means no DEL at all.
	WholeChain bool
}

// Attachment is l's network and container id.
func (l Leaving) Attachment() Attachment { return Attachment{Network: l.Network.Name, ID: l.ID} }

// alongside says each DEL runs while the workload has other attachments:
// those it keeps, or the other networks leaving at once.
func (d Detach) alongside() bool { return d.Others || len(d.Leaving) > 1 }

// leaving returns the Leaving of att (zero when d does not name it).
func (d Detach) leaving(att Attachment) Leaving {
	for _, l := range d.Leaving {
		if l.Attachment() == att {
			return l
		}
	}
	return Leaving{Network: Network{Name: att.Network}, ID: att.ID}
}

// attachments returns what d takes.
func (d Detach) attachments() []Attachment {
	atts := make([]Attachment, len(d.Leaving))
	for i, l := range d.Leaving {
		atts[i] = l.Attachment()
	}
	return atts
}

// HostportCheck is what the host answered when the decision asked
// whether portmap's nftables DEL, which deletes by the bare container id,
// would reach only the leaving attachments' hostport rules.
type HostportCheck struct {
	// Asked says the decision read the host for it.
	Asked bool
	// Only says it would: the host holds no hostport rule of the id for
	// an address none of them held.
	Only bool
	// Err is why the rules could not be read (the answer is then no).
	Err error
}

// NotOwn says the host was asked and portmap's DEL was kept from running.
func (h HostportCheck) NotOwn() bool { return h.Asked && !h.Only }

// hostportReach answers whether portmap's nftables DEL of atts' ids,
// run on first's network, would reach only atts' hostport rules.
type hostportReach func(first Network, atts []Attachment) (bool, error)

// decide adds to p what the detach d keeps att's DEL from running: p
// holds what the host required (PreventAll) already.
func (d Detach) decide(att Attachment, n Network, p *Prevention, reach hostportReach) {
	l := d.leaving(att)
	if d.alongside() && n.HostportNFT && !slices.Contains(p.Omit, "portmap") && !d.hostportsOwn(l, n, p, reach) {
		p.Omit = append(p.Omit, "portmap")
	}
	p.OmitLoopback = d.LoopbackUp && n.runs("loopback") && !l.WholeChain // not kept from anyone's state: lo stays up
}

// hostportsOwn says, for a DEL that names its attachment exactly, that
// portmap's DEL reaches only l's hostport rules: it may then run.
func (d Detach) hostportsOwn(l Leaving, n Network, p *Prevention, reach hostportReach) bool {
	if !d.Exact || !l.PortMappings {
		return false
	}
	only, err := reach(n, []Attachment{l.Attachment()})
	p.Hostports = HostportCheck{Asked: true, Only: only && err == nil, Err: err}
	return p.Hostports.Only
}

// hostportsFirst decides, for a whole workload leaving several networks,
// on which leaving attachment's network portmap's nftables DEL runs
// once, before every network's own DEL (which each leave portmap out):
// the first whose DEL would hand portmap mappings, when the host holds
// only the leaving attachments' hostport rules of the id (the same id may
// be attached to a network the caller does not know, by another
// runtime).
func (d Detach) hostportsFirst(p *Prevention, reach hostportReach) {
	if d.Others || len(d.Leaving) < 2 {
		return
	}
	i := slices.IndexFunc(d.Leaving, func(l Leaving) bool { return l.Network.HostportNFT && l.PortMappings })
	if i < 0 {
		return
	}
	only, err := reach(d.Leaving[i].Network, d.attachments())
	p.Hostports = HostportCheck{Asked: true, Only: only && err == nil, Err: err}
	if p.Hostports.Only {
		first := d.Leaving[i]
		p.HostportsFirst = &first
	}
}

// PreventWorkload is the prevention of the whole detach, before any
// network's own (Cleaner.Prevent): whether portmap's nftables DEL runs
// first, once, for the whole workload (Prevention.HostportsFirst, run
// with the filter HostportsAlone). seams is called only when the host
// must be read.
func (d Detach) PreventWorkload(ctx context.Context, seams func() Seams) Prevention {
	var p Prevention
	d.hostportsFirst(&p, func(first Network, atts []Attachment) (bool, error) {
		return NewCleaner(ctx, first, seams()).hostportDELReachesOnly(atts)
	})
	return p
}

// PluginFilter says which plugins of a network's chain a DEL runs. The
// zero value runs the whole chain.
type PluginFilter struct {
	omit []string // all but these
	only []string // these alone, apart from the network's own DEL
}

// Without is the chain without the plugins of the given types: still the
// network's DEL, which reads and removes its cached result.
func Without(types ...string) PluginFilter { return PluginFilter{omit: types} }

// HostportsAlone is portmap's DEL alone, for a whole workload before its
// networks' own DELs (Prevention.HostportsFirst).
var HostportsAlone = PluginFilter{only: []string{"portmap"}}

// Runs reports whether the DEL runs the plugins of type typ.
func (f PluginFilter) Runs(typ string) bool {
	if f.Apart() {
		return slices.Contains(f.only, typ)
	}
	return !slices.Contains(f.omit, typ)
}

// Whole reports whether the DEL runs the whole chain.
func (f PluginFilter) Whole() bool { return len(f.omit) == 0 && len(f.only) == 0 }

// Apart reports whether the DEL runs only some plugins, apart from the
// network's own DEL: it must run on no libcni cache, since the network's
// own DEL still needs the cached result.
func (f PluginFilter) Apart() bool { return len(f.only) > 0 }

// LeftOut returns the plugin types Without left out.
func (f PluginFilter) LeftOut() []string { return slices.Clone(f.omit) }
