package footprint

import (
	"net/netip"
	"slices"
	"sort"

	"github.com/seed1280861d/cninet/internal/hostwork"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// A footprint is what one plugin (with one backend) leaves on a host for
// an attachment, and everything cninet knows about it: its names, how it
// proves that an attachment held an address, what it plans to delete,
// and what it discovers for a GC. Each lives in one file; adding a plugin
// is one file and one line in footprints.
//
// A run is one pass in one direction: read the host (a view, each thing
// read once) → evidence (a value: which addresses the set's attachments
// provably held, which ones other attachments hold now) → plan (a value:
// deletions) → apply (one
// batched applier per backend) → report exactly what changed.
type footprint interface {
	// prove returns the addresses the set's attachments provably held
	// according to this piece of state.
	prove(v *view, set attSet) []claim
	// holders returns the attachments outside set that hold one of addrs
	// now according to this piece of state.
	holders(v *view, set attSet, addrs addrSet) []claim
	// plan adds the deletions of the set's footprint, judged on ev.
	plan(v *view, set attSet, ev *evidence, p *plan)
	// discover adds the attachments whose footprint is on the host; it is
	// given a whole view.
	discover(v *view, found attSet)
}

// byAddress is a footprint whose rules name no attachment, only an
// address (the firewall plugin's, portmap's nftables rules): contest
// returns the owned addresses it has rules for, the only ones whose
// holders must be asked before the rules can be judged.
type byAddress interface {
	contest(v *view, set attSet, own map[netip.Addr]Attachment) []netip.Addr
}

// footprints is every footprint cninet knows, in the order evidence is
// gathered (cheapest proof first).
var footprints = []footprint{
	hostLocal{}, libcniCache{},
	bridgeIPT{}, bridgeNFT{},
	portmapIPT{}, portmapNFT{},
	firewallIPT{},
	bandwidth{}, tuning{},
	withheld{},
}

// claim says an attachment holds (or held) an address.
type claim struct {
	addr netip.Addr
	by   Attachment
}

// evidence is what a run knows about addresses before it plans: own, the
// addresses the set's attachments provably held, and held, those that an
// attachment outside the set holds now (every one of them: one that
// lives may hide behind one that does not). held is complete for the
// addresses asked about: every contested one (a GC asks about
// all).
type evidence struct {
	own   map[netip.Addr]Attachment
	held  map[netip.Addr][]Attachment
	asked map[netip.Addr]bool
}

// askedAny reports whether an address of the family was asked about.
func (ev *evidence) askedAny(v6 bool) bool {
	for a := range ev.asked {
		if a.Is6() == v6 {
			return true
		}
	}
	return false
}

// owner returns the attachment of the set that owns addr: it provably
// held it and nobody else holds it now.
func (ev *evidence) owner(addr netip.Addr) (Attachment, bool) {
	if len(ev.held[addr]) > 0 {
		return Attachment{}, false
	}
	a, ok := ev.own[addr]
	return a, ok
}

// gatherInto adds to ev the evidence of a run: the proof of every
// footprint, then the holders of the addresses that must be judged: what
// the byAddress footprints would delete rules for. A proof already in ev
// stands.
func gatherInto(v *view, set attSet, ev *evidence) {
	for _, fp := range footprints {
		for _, c := range fp.prove(v, set) {
			if _, dup := ev.own[c.addr]; !dup {
				ev.own[c.addr] = c.by
			}
		}
	}
	if v.whole { // every address: asked in place, a sweep's are tens of thousands
		for a := range ev.own {
			ev.asked[a] = true
		}
		askHoldersOf(v, set, ev, ev.asked)
		return
	}
	var asked []netip.Addr
	for _, fp := range footprints {
		if ba, ok := fp.(byAddress); ok {
			asked = append(asked, ba.contest(v, set, ev.own)...)
		}
	}
	askHolders(v, set, ev, asked)
}

// askHolders adds to ev the attachments outside set that hold addrs.
func askHolders(v *view, set attSet, ev *evidence, addrs []netip.Addr) {
	asked := newAddrSet(addrs)
	for a := range asked {
		ev.asked[a] = true
	}
	askHoldersOf(v, set, ev, asked)
}

// askHoldersOf adds to ev the attachments outside set that hold asked,
// which it only reads.
func askHoldersOf(v *view, set attSet, ev *evidence, asked addrSet) {
	if len(asked) == 0 {
		return
	}
	for _, fp := range footprints {
		for _, c := range fp.holders(v, set, asked) {
			if !set[c.by] && !slices.Contains(ev.held[c.addr], c.by) {
				ev.held[c.addr] = append(ev.held[c.addr], c.by)
			}
		}
	}
	if v.host.Records == nil {
		return
	}
	end := v.meter.Begin(hostwork.Registry, "the host registry's holders", false)
	holding := v.host.Records.Holding(asked.all())
	end(0, 0)
	for addr, holders := range holding { // a live attachment whose files a drift took
		for _, by := range holders {
			if !set[by] && !slices.Contains(ev.held[addr], by) {
				ev.held[addr] = append(ev.held[addr], by)
			}
		}
	}
}

func newEvidence() *evidence {
	return &evidence{own: map[netip.Addr]Attachment{}, held: map[netip.Addr][]Attachment{}, asked: map[netip.Addr]bool{}}
}

func uniqueAddrs(addrs []netip.Addr) []netip.Addr {
	slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(addrs)
}

// chainsOf returns the chain name fn derives for each of the set's
// attachments.
func chainsOf(set attSet, fn func(Attachment) string) []string {
	out := make([]string, 0, len(set))
	for _, a := range set.sorted() {
		out = append(out, fn(a))
	}
	return out
}

// commentIndex maps each stored comment of the set's attachments to the
// attachments that could have written it: cut comments can stand for
// several.
func commentIndex(set attSet, comment func(Attachment) string) map[string][]Attachment {
	index := make(map[string][]Attachment, len(set))
	for _, a := range set.sorted() {
		stored := iptables.StoredComment(comment(a))
		index[stored] = append(index[stored], a)
	}
	return index
}

// ownerIn returns the candidate that owns r, nil when none does.
func ownerIn(r iptables.Rule, candidates []Attachment, owns func(Attachment, iptables.Rule) bool) *Attachment {
	for i := range candidates {
		if owns(candidates[i], r) {
			return &candidates[i]
		}
	}
	return nil
}

// familyAddrs returns the addresses of one family.
func familyAddrs(addrs []netip.Addr, v6 bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if a.Is6() == v6 {
			out = append(out, a)
		}
	}
	return out
}

// addrSet is a set of addresses.
type addrSet map[netip.Addr]bool

func newAddrSet(addrs []netip.Addr) addrSet {
	s := make(addrSet, len(addrs))
	for _, a := range addrs {
		s[a] = true
	}
	return s
}

// list returns the set's addresses of one family, sorted.
func (s addrSet) list(v6 bool) []netip.Addr {
	var out []netip.Addr
	for a := range s {
		if a.Is6() == v6 {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// all returns the set's addresses, sorted.
func (s addrSet) all() []netip.Addr { return append(s.list(false), s.list(true)...) }

// known reports whether a's network is one the run knows.
func (v *view) known(a Attachment) bool {
	_, ok := v.nets[a.Network]
	return ok
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
