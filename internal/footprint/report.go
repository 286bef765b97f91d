package footprint

import (
	"slices"
	"sort"
	"sync"
)

// Item is one piece of host state that a run removed (or added back).
type Item struct {
	Kind    Kind
	ID      string // the container id that owned it
	Network string // the network of the attachment that owned it ("" when its state names none)
	Backend string // "iptables", "ip6tables", "nftables", "files" or "links"
	Detail  string // the rule, chain, file or device
}

// Report is what a run applied, kept compact: a GC sweep after a bad
// night removes hundreds of thousands of rules, and a Report holds each
// as one small entry whose detail shares the listing's text. Items are
// rendered only when asked for. Safe for concurrent use.
type Report struct {
	mu       sync.Mutex
	atts     []Attachment
	index    map[Attachment]uint32
	removed  []entry
	restored []entry
}

// entry is one Item, compact: detail is the rule line, chain name, path,
// device name or nftables rule, completed by its shape when rendered.
type entry struct {
	detail string
	att    uint32 // index in Report.atts
	shape  shape
	v6     bool  // iptables rules and chains: ip6tables
	table  uint8 // iptables rules and chains: index in iptTables
}

// shape is what an entry is, which says its Kind, its Backend and how its
// Detail reads.
type shape uint8

const (
	shapeIPTRule shape = iota
	shapeIPTChain
	shapeNFTRule
	shapeReservation
	shapeCachedResult
	shapeTuningFile
	shapeLink
)

// iptTables are the iptables tables a run changes.
var iptTables = [...]string{"nat", "filter"}

func iptTableIndex(table string) uint8 {
	if i := slices.Index(iptTables[:], table); i >= 0 {
		return uint8(i)
	}
	panic("footprint: iptables table " + table + " is not one cleanup changes")
}

func fileShape(k Kind) shape {
	switch k {
	case KindReservation:
		return shapeReservation
	case KindCachedResult:
		return shapeCachedResult
	case KindTuningFile:
		return shapeTuningFile
	}
	panic("footprint: file kind " + string(k) + " has no shape")
}

func (s shape) kind() Kind {
	return [...]Kind{KindRule, KindChain, KindNFTRule, KindReservation, KindCachedResult, KindTuningFile, KindLink}[s]
}

// note records one change of att.
func (r *Report) note(restored bool, att Attachment, e entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.index[att]
	if !ok {
		if r.index == nil {
			r.index = map[Attachment]uint32{}
		}
		i = uint32(len(r.atts))
		r.atts = append(r.atts, att)
		r.index[att] = i
	}
	e.att = i
	if restored {
		r.restored = append(r.restored, e)
	} else {
		r.removed = append(r.removed, e)
	}
}

// grow makes room for n more removals at once.
func (r *Report) grow(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = slices.Grow(r.removed, n)
}

// item renders an entry of atts.
func item(atts []Attachment, e entry, restored bool) Item {
	att := atts[e.att]
	it := Item{Kind: e.shape.kind(), ID: att.ID, Network: att.Network, Detail: e.detail}
	switch e.shape {
	case shapeIPTRule, shapeIPTChain:
		it.Backend = familyName(e.v6)
		what := " rule "
		if e.shape == shapeIPTChain {
			what = " chain "
		}
		it.Detail = it.Backend + " " + iptTables[e.table] + what + e.detail
	case shapeNFTRule:
		it.Backend, it.Detail = "nftables", "nftables rule "+e.detail
	case shapeLink:
		it.Backend, it.Detail = "links", "device "+e.detail
	default:
		it.Backend = "files"
	}
	if restored {
		it.Detail += " (added back)"
	}
	return it
}

// Len returns how many pieces were removed.
func (r *Report) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.removed)
}

// Each calls fn with each removed Item, in the order they were removed,
// until fn returns false. Each Item is rendered as it is passed.
func (r *Report) Each(fn func(Item) bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	atts, removed := r.atts[:len(r.atts):len(r.atts)], r.removed[:len(r.removed):len(r.removed)]
	r.mu.Unlock()
	for _, e := range removed {
		if !fn(item(atts, e, false)) {
			return
		}
	}
}

// Removed returns every removed Item.
func (r *Report) Removed() []Item { return r.items(false) }

// Restored returns the other attachments' pieces that were added back
// after a DEL had removed them.
func (r *Report) Restored() []Item { return r.items(true) }

func (r *Report) items(restored bool) []Item {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	entries := r.removed
	if restored {
		entries = r.restored
	}
	out := make([]Item, len(entries))
	for i, e := range entries {
		out[i] = item(r.atts, e, restored)
	}
	return out
}

// Count returns how many removed pieces are of kind, rendering none.
func (r *Report) Count(kind Kind) int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.removed {
		if e.shape.kind() == kind {
			n++
		}
	}
	return n
}

// IDs returns the container ids something was removed for, sorted.
func (r *Report) IDs() []string {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := make([]bool, len(r.atts))
	var ids []string
	for _, e := range r.removed {
		if !seen[e.att] {
			seen[e.att] = true
			ids = append(ids, r.atts[e.att].ID)
		}
	}
	sort.Strings(ids)
	return slices.Compact(ids)
}
