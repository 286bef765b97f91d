package footprint

import (
	"slices"
	"sort"
	"sync"

	"github.com/seed1280861d/cninet/host"
)

// Item is one piece of host state that a run removed.
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
	mu      sync.Mutex
	atts    []Attachment
	index   map[Attachment]uint32
	removed entries
}

// entry is one Item, compact: detail is the rule line, chain name, path
// or device name, or nft the nftables rule (in the listing it was judged
// on, which a sweep holds anyway), completed by its shape when rendered.
type entry struct {
	detail string
	nft    *host.NFTRule
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
	shapeIntentRecord
)

// iptTables are the iptables tables a run changes.
var iptTables = [...]string{natTable: "nat", filterTable: "filter"}

const (
	natTable uint8 = iota
	filterTable
)

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
	case KindIntentRecord:
		return shapeIntentRecord
	}
	panic("footprint: file kind " + string(k) + " has no shape")
}

func (s shape) kind() Kind {
	return [...]Kind{KindRule, KindChain, KindNFTRule, KindReservation, KindCachedResult, KindTuningFile, KindLink, KindIntentRecord}[s]
}

// note records one change of att.
func (r *Report) note(att Attachment, e entry) { r.noteAt(r.attIndex(att), e) }

// noteAt records one change of the attachment of index att (attIndex).
func (r *Report) noteAt(att uint32, e entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.att = att
	r.removed.add(e)
}

// reserve makes room for n attachments at once.
func (r *Report) reserve(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.index == nil {
		r.index = make(map[Attachment]uint32, n)
		r.atts = make([]Attachment, 0, n)
	}
}

// attIndex returns att's index, numbering it the first time.
func (r *Report) attIndex(att Attachment) uint32 {
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
	return i
}

// entries is an append-only list of entries kept in blocks: a sweep's
// hundred thousand are never copied as they grow, nor reserved twice.
type entries struct {
	blocks [][]entry
	n      int
}

// Blocks start small and double up to entryBlock: a Teardown's report
// holds a handful of entries, a sweep's tens of thousands.
const (
	firstEntryBlock = 16
	entryBlock      = 4096
)

func (es *entries) add(e entry) {
	if k := len(es.blocks); k == 0 || len(es.blocks[k-1]) == cap(es.blocks[k-1]) {
		size := firstEntryBlock
		if k > 0 {
			size = min(2*cap(es.blocks[k-1]), entryBlock)
		}
		es.blocks = append(es.blocks, make([]entry, 0, size))
	}
	last := &es.blocks[len(es.blocks)-1]
	*last = append(*last, e)
	es.n++
}

// frozen returns the entries added so far, which later additions leave
// as they are.
func (es *entries) frozen() entries {
	blocks := make([][]entry, len(es.blocks))
	for i, b := range es.blocks {
		blocks[i] = b[:len(b):len(b)]
	}
	return entries{blocks, es.n}
}

// all yields the entries in the order they were added.
func (es entries) all(yield func(entry) bool) {
	for _, b := range es.blocks {
		for _, e := range b {
			if !yield(e) {
				return
			}
		}
	}
}

// item renders an entry of atts.
func item(atts []Attachment, e entry) Item {
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
		it.Backend, it.Detail = "nftables", "nftables rule "+e.nft.String()
	case shapeLink:
		it.Backend, it.Detail = "links", "device "+e.detail
	default:
		it.Backend = "files"
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
	return r.removed.n
}

// Each calls fn with each removed Item, in the order they were removed,
// until fn returns false. Each Item is rendered as it is passed.
func (r *Report) Each(fn func(Item) bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	atts, removed := r.atts[:len(r.atts):len(r.atts)], r.removed.frozen()
	r.mu.Unlock()
	for e := range removed.all {
		if !fn(item(atts, e)) {
			return
		}
	}
}

// Removed returns every removed Item.
func (r *Report) Removed() []Item {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Item, 0, r.removed.n)
	for e := range r.removed.all {
		out = append(out, item(r.atts, e))
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
	for e := range r.removed.all {
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
	for e := range r.removed.all {
		if !seen[e.att] {
			seen[e.att] = true
			ids = append(ids, r.atts[e.att].ID)
		}
	}
	sort.Strings(ids)
	return slices.Compact(ids)
}
