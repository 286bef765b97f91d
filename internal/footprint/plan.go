package footprint

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/killpoint"
)

// plan is what a run will change, by backend: planned completely before
// anything is applied, so every judgement is made on the same evidence.
type plan struct {
	ipt     [2][]iptChange // iptables, ip6tables
	nft     []nftChange
	files   []fileChange
	links   []linkChange
	records []fileChange // intent records (withheld.go): removed when all else went well

	// atts numbers the attachments the iptables and nftables changes
	// name: a sweep plans a hundred thousand of them, for a few
	// attachments each.
	atts *Report
}

// iptChange deletes a rule or a whole chain of an attachment.
type iptChange struct {
	rule  *iptables.Rule // a rule, or
	chain string         // a chain to flush and delete
	att   uint32         // the attachment's index in plan.atts
	table uint8          // index in iptTables
}

func (c iptChange) tableName() string { return iptTables[c.table] }

// nftChange deletes a rule of an attachment.
type nftChange struct {
	rule *host.NFTRule
	att  uint32 // the attachment's index in plan.atts
}

// fileChange removes a file of an attachment. A reservation (lockDir set)
// is re-read under host-local's lock first: host-local may have handed
// the address to somebody else since it was read.
type fileChange struct {
	kind    Kind
	att     Attachment
	path    string
	lockDir string
}

// linkChange deletes a network device of an attachment in the host's
// namespace.
type linkChange struct {
	att  Attachment
	name string
}

// growIPT makes room for n more changes of a family at once: a sweep
// plans hundreds of thousands, and growing by appends alone would copy
// them over and over.
func (p *plan) growIPT(v6 bool, n int) { p.ipt[b2i(v6)] = slices.Grow(p.ipt[b2i(v6)], n) }

func (p *plan) deleteRule(v6 bool, att Attachment, table string, r *iptables.Rule) {
	p.ipt[b2i(v6)] = append(p.ipt[b2i(v6)], iptChange{att: p.atts.attIndex(att), table: iptTableIndex(table), rule: r})
}

func (p *plan) deleteChain(v6 bool, att Attachment, table, chain string) {
	p.ipt[b2i(v6)] = append(p.ipt[b2i(v6)], iptChange{att: p.atts.attIndex(att), table: iptTableIndex(table), chain: chain})
}

func (p *plan) deleteNFTRule(att Attachment, r *host.NFTRule) {
	p.nft = append(p.nft, nftChange{att: p.atts.attIndex(att), rule: r})
}

// Kind says what kind of host state an Item was.
type Kind string

// The kinds of state a run removes (KindNFTRule is with the nftables view).
const (
	KindRule         Kind = "iptables rule"
	KindChain        Kind = "iptables chain"
	KindReservation  Kind = "ip reservation"
	KindCachedResult Kind = "cached result"
	KindLink         Kind = "network device"
	KindTuningFile   Kind = "tuning backup"
	KindIntentRecord Kind = "intent record"
)

// listingFailed reports whether an iptables listing of the run failed:
// the files stay, as the proof of rules that may still be there.
func (v *view) listingFailed() bool {
	for _, f := range v.allIPT {
		if f != nil && f.listFailed() {
			return true
		}
	}
	return false
}

// apply runs the plan, one applier per backend (the backends share
// nothing, so they run in parallel), and reports what changed.
func apply(v *view, p *plan, rep *Report) {
	var wg sync.WaitGroup
	for _, f := range v.families() {
		if changes := p.ipt[b2i(f.v6)]; len(changes) > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				applyIPT(f, changes, v.errs, rep)
			}()
		}
	}
	if len(p.nft) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applyNFT(v.nft, p.nft, rep)
		}()
	}
	wg.Wait()
	killpoint.Reached(killpoint.RulesRemoved)
	if !cutShort(v.errs.err()) && !v.listingFailed() {
		applyFiles(v, p.files, rep)
	}
	killpoint.Reached(killpoint.FilesRemoved)
	applyLinks(v, p.links, rep)
	if v.errs.errExcept(host.ErrIPTablesMissing) == nil { // the record is the proof of whatever failed
		applyFiles(v, p.records, rep)
	}
}

// notePlanned reports every change of p as apply would once made (a dry
// run), and makes none.
func notePlanned(v *view, p *plan, rep *Report) {
	for _, f := range v.families() {
		for _, c := range p.ipt[b2i(f.v6)] {
			rep.noteAt(c.att, iptEntry(f, c))
		}
	}
	for _, c := range p.nft {
		rep.noteAt(c.att, nftEntry(c))
	}
	for _, c := range append(slices.Clip(p.files), p.records...) {
		rep.note(c.att, entry{detail: c.path, shape: fileShape(c.kind)})
	}
	for _, c := range p.links {
		rep.note(c.att, entry{detail: c.name, shape: shapeLink})
	}
}

// cutShort reports whether a run's error says it could not finish with
// the rules because its context ended or the xtables lock could not be
// had. The attachments' reservations and cached results then stay:
// they are the proof of the addresses that a later Teardown or GC needs to
// judge the comment-less rules left behind, and host-local's reservation
// keeps the address from a new workload, whose rules would look the same,
// until then. A context that ends after the rules are done cuts nothing
// short: the files go.
func cutShort(err error) bool {
	return errors.Is(err, host.ErrXtablesLock) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
