package nfnetlink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/seed1280861d/cninet/host"
)

// Deleting rules one by one costs a search of the chain each (iptables'
// -D compares every rule) or a process each; nf_tables deletes a rule by
// its handle in constant time, and many deletions travel in one batch,
// which the kernel applies as one transaction. This file builds such
// batches from a dump of the chains involved: a planned rule is deleted
// by handle only when the dump shows it exactly where and as it was
// planned, and the batch carries the generation the dump was taken at,
// so that the kernel refuses it if anything changed in between. Every
// deletion is acked on its own, so the caller learns exactly which
// happened.

// nfnetlink batch and nf_tables write constants (linux/netfilter/nfnetlink.h,
// nf_tables.h).
const (
	nfnlMsgBatchBegin = 0x10 // NLMSG_MIN_TYPE
	nfnlMsgBatchEnd   = 0x11
	nfnlBatchGenID    = 1 // NFNL_BATCH_GENID

	nftMsgDelChain = 5
	nftMsgDelRule  = 8
	nftMsgNewGen   = 15
	nftMsgGetGen   = 16

	nftaGenID = 1

	afUnspec = 0
)

// batchChunk bounds the deletions of one batch: every deletion is acked,
// and the acks of one batch must fit the socket's receive buffer at once.
const batchChunk = 256

// batchAttempts bounds the rounds of dump, match and batch when the
// ruleset keeps changing in between.
const batchAttempts = 16

// batchBackoff is the most a refused batch waits, times its attempt,
// before it reads again: on a host whose workloads come and go the
// plugins change nf_tables all the time, and a batch built on a dump is
// refused whenever one of them wrote in between.
const batchBackoff = 5 * time.Millisecond

// ErrGenerationChanged says nf_tables changed since the rules a batch was
// built from were read, so the kernel refused the batch (or the read was
// inconsistent): the rules must be read again.
var ErrGenerationChanged = errors.New("nf_tables changed since its rules were read")

// Target is one planned rule deletion: where the rule is expected
// and what it must contain to be taken for the planned rule.
type Target struct {
	Chain  string
	Pos    int    // its index among the chain's rules, or -1: anywhere
	Handle uint64 // its handle, or 0: whatever handle it has
	// ChainLen, with Pos, is how many rules the chain had when Pos was
	// taken (0: not known). A chain of another length now changed since:
	// another rule may have slid into Pos, one that the comment and
	// needles cannot tell from the planned one (the firewall plugin's
	// two comment-less rules of one address), so no position in it is
	// trusted.
	ChainLen int
	// Comment must equal the rule's Comment; needles must each appear
	// in its expressions.
	Comment string
	Needles [][]byte
	// XtComment also accepts the comment as iptables-nft writes it: an
	// xtables "comment" match in the expressions instead of user data.
	XtComment bool
}

// nftaMatchInfo is NFTA_MATCH_INFO, where an xtables match keeps its
// arguments (for "comment", the text in a 256-byte field).
const (
	nftaMatchInfo    = 3
	xtCommentInfoLen = 256
)

// XtCommentNeedle is how comment begins in the expressions of a rule that
// carries it as an xtables match: the info attribute's header, then the
// text and its NUL, so that neither a longer comment nor one that merely
// ends the same way matches.
func XtCommentNeedle(comment string) []byte {
	b := binary.NativeEndian.AppendUint16(nil, nlaHeaderLen+xtCommentInfoLen)
	b = binary.NativeEndian.AppendUint16(b, nftaMatchInfo)
	return append(append(b, comment...), 0)
}

// commentMatches reports whether r carries exactly the target's comment.
func (t Target) commentMatches(r Rule) bool {
	if !t.XtComment || r.Comment != "" {
		return r.Comment == t.Comment
	}
	if t.Comment == "" {
		return !bytes.Contains(r.Expr, []byte("comment\x00"))
	}
	return bytes.Contains(r.Expr, XtCommentNeedle(t.Comment))
}

// Matches reports whether r, found at index pos of the chain, is the
// planned rule.
func (t Target) Matches(pos int, r Rule) bool {
	if (t.Pos >= 0 && t.Pos != pos) || (t.Handle != 0 && t.Handle != r.Handle) || (t.Pos < 0 && t.Handle == 0) {
		return false
	}
	if r.Handle == 0 || !t.commentMatches(r) {
		return false
	}
	for _, n := range t.Needles {
		if !r.Mentions([][]byte{n}) {
			return false
		}
	}
	return true
}

// deleteRules deletes the rules of targets from table of family by handle,
// in batches, and returns what became of each. A target that matches no
// rule of the dump is NotDeleted; a rule the kernel no longer has is
// AlreadyGone. When nf_tables changed between the dump and a batch, the
// targets not yet settled are matched again on a new dump, up to
// batchAttempts times.
func deleteRules(s nlSocket, family, table string, targets []Target) ([]host.HandleOutcome, error) {
	proto, ok := nfproto[family]
	if !ok {
		return nil, fmt.Errorf("netlink: unknown nftables family %q", family)
	}
	out := make([]host.HandleOutcome, len(targets))
	settled := make([]bool, len(targets))
	names := attrNames{}
	for attempt := 1; ; attempt++ {
		gen, handles, err := matchHandles(s, proto, family, table, targets, settled)
		if err == nil {
			items := make([]int, 0, len(handles))
			for i, h := range handles {
				switch {
				case settled[i]:
				case h == 0:
					settled[i] = true // not there as planned: NotDeleted
				default:
					items = append(items, i)
				}
			}
			err = applyDeletions(s, proto, gen, items, func(i int, msgs []batchMsg) []batchMsg {
				return append(msgs, batchMsg{item: i, typ: nftMsgDelRule, attrs: []nlAttr{
					{nftaRuleTable, names.strz(table)}, {nftaRuleChain, names.strz(targets[i].Chain)},
					{nftaRuleHandle, binary.BigEndian.AppendUint64(nil, handles[i])}}})
			}, out, settled)
		}
		switch {
		case errors.Is(err, ErrGenerationChanged) && attempt < batchAttempts:
			time.Sleep(rand.N(batchBackoff * time.Duration(attempt)))
			continue
		case err != nil:
			return out, fmt.Errorf("netlink: deleting rules of %s %s: %w", family, table, err)
		}
		return out, nil
	}
}

// attrNames encodes each name once: the deletions of a sweep name a few
// tables and chains tens of thousands of times.
type attrNames map[string][]byte

func (n attrNames) strz(name string) []byte {
	b, ok := n[name]
	if !ok {
		b = strz(name)
		n[name] = b
	}
	return b
}

// matchHandles reads the generation, dumps each chain that holds a target
// not yet settled, and returns the handle of the rule each such target
// matches (0: none), at that generation. A dump that a change interrupted,
// or a generation that moved during the dumps, is errGenerationChanged.
func matchHandles(s nlSocket, proto uint8, family, table string, targets []Target, settled []bool) (uint32, []uint64, error) {
	byChain := map[string][]int{}
	var chains []string
	for i, t := range targets {
		if !settled[i] {
			if _, ok := byChain[t.Chain]; !ok {
				chains = append(chains, t.Chain)
			}
			byChain[t.Chain] = append(byChain[t.Chain], i)
		}
	}
	handles := make([]uint64, len(targets))
	gen, err := generation(s)
	if err != nil || len(chains) == 0 {
		return gen, handles, err
	}
	for _, chain := range chains {
		if err := matchChain(s, proto, family, table, chain, targets, byChain[chain], handles); err != nil {
			return 0, nil, err
		}
	}
	if after, err := generation(s); err != nil || after != gen {
		return 0, nil, errors.Join(err, ErrGenerationChanged)
	}
	return gen, handles, nil
}

// matchChain dumps one chain and records in handles which rule each of
// its targets (idx) is. A handle is given to one target only.
func matchChain(s nlSocket, proto uint8, family, table, chain string, targets []Target, idx []int, handles []uint64) error {
	byPos, byHandle := map[int][]int{}, map[uint64][]int{}
	for _, i := range idx {
		if targets[i].Pos >= 0 {
			byPos[targets[i].Pos] = append(byPos[targets[i].Pos], i)
		} else {
			byHandle[targets[i].Handle] = append(byHandle[targets[i].Handle], i)
		}
	}
	var parseErr error
	pos, seq := 0, nlSeq.Add(1)
	req := nftRequest(nftMsgGetRule, nlmFDump, seq, proto, nlAttr{nftaRuleTable, strz(table)}, nlAttr{nftaRuleChain, strz(chain)})
	err := exchange(s, req, seq, func(m nlMessage) bool {
		r, err := parseNLRule(family, m)
		if err != nil {
			parseErr = err
			return false
		}
		if !r.in(table, chain) {
			return true
		}
		for _, i := range append(byPos[pos], byHandle[r.Handle]...) {
			if handles[i] == 0 && targets[i].Matches(pos, r) {
				handles[i] = r.Handle
				break
			}
		}
		pos++
		return true
	})
	switch {
	case parseErr != nil:
		return parseErr
	case errors.Is(err, syscall.ENOENT):
		return nil // no such chain: nothing matches
	case errors.Is(err, errDumpInterrupted):
		return ErrGenerationChanged
	case err != nil:
		return fmt.Errorf("reading chain %s: %w", chain, err)
	}
	for _, i := range idx {
		if t := targets[i]; t.Pos >= 0 && t.ChainLen > 0 && t.ChainLen != pos {
			handles[i] = 0 // the chain changed since its position was taken
		}
	}
	return nil
}

// generation returns nf_tables' ruleset generation; every committed
// transaction moves it.
func generation(s nlSocket) (uint32, error) {
	seq := nlSeq.Add(1)
	var gen uint32
	found := false
	err := exchange(s, nftRequest(nftMsgGetGen, nlmFAck, seq, afUnspec), seq, func(m nlMessage) bool {
		if m.typ == nfnlSubsysNFTables<<8|nftMsgNewGen && len(m.payload) >= nfgenmsgLen {
			_ = eachAttr(m.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
				if typ == nftaGenID && len(data) == 4 {
					gen, found = binary.BigEndian.Uint32(data), true
				}
			})
		}
		return true
	})
	if err == nil && !found {
		err = errors.New("the kernel's answer named no generation")
	}
	if err != nil {
		return 0, fmt.Errorf("reading the ruleset generation: %w", err)
	}
	return gen, nil
}

// deleteChains flushes and deletes chains of table of family by name, in
// batches, and returns what became of each: a chain that does not exist
// is AlreadyGone, one that a rule still jumps to (EBUSY) is NotDeleted.
func deleteChains(s nlSocket, family, table string, chains []string) ([]host.HandleOutcome, error) {
	proto, ok := nfproto[family]
	if !ok {
		return nil, fmt.Errorf("netlink: unknown nftables family %q", family)
	}
	out := make([]host.HandleOutcome, len(chains))
	settled := make([]bool, len(chains))
	items := make([]int, len(chains))
	for i := range items {
		items[i] = i
	}
	tableName := strz(table)
	flushAndDelete := func(i int, msgs []batchMsg) []batchMsg {
		name := strz(chains[i])
		return append(msgs,
			batchMsg{item: i, typ: nftMsgDelRule, attrs: []nlAttr{{nftaRuleTable, tableName}, {nftaRuleChain, name}}},
			batchMsg{item: i, typ: nftMsgDelChain, attrs: []nlAttr{{nftaChainTable, tableName}, {nftaChainName, name}}})
	}
	if err := applyDeletions(s, proto, 0, items, flushAndDelete, out, settled); err != nil {
		return out, fmt.Errorf("netlink: deleting chains of %s %s: %w", family, table, err)
	}
	return out, nil
}

// batchMsg is one deletion of a batch, for item (several messages may
// serve one item: a chain's flush and its deletion).
type batchMsg struct {
	item  int
	typ   uint16
	attrs []nlAttr
}

// applyDeletions sends the messages of items (build appends those of one
// item: a chain's flush and deletion stay in one batch) in batches of
// about batchChunk, each at generation gen (0: any), and settles the
// items in out: Deleted when a batch commits, AlreadyGone on ENOENT,
// NotDeleted on EBUSY. A batch that the kernel aborted for those answers
// is sent again without their items; any other refusal is an error, and
// leaves the batch's items unsettled. Messages are built a batch at a
// time: a sweep deletes tens of thousands of rules.
func applyDeletions(s nlSocket, proto uint8, gen uint32, items []int, build func(item int, msgs []batchMsg) []batchMsg, out []host.HandleOutcome, settled []bool) error {
	msgs := make([]batchMsg, 0, batchChunk+2)
	for len(items) > 0 {
		msgs = msgs[:0]
		for len(items) > 0 && len(msgs) < batchChunk {
			msgs, items = build(items[0], msgs), items[1:]
		}
		committed := false
		for chunk := msgs; len(chunk) > 0 && !committed; {
			errs, err := sendBatch(s, proto, gen, chunk)
			if err != nil {
				return err
			}
			if err := firstHardError(errs); err != nil {
				return err
			}
			chunk, committed = settle(chunk, errs, out, settled)
		}
		if committed && gen != 0 {
			if gen++; gen == 0 { // our commit moved the generation by one
				gen = 1
			}
		}
	}
	return nil
}

// settle records the acks of one batch. When every message was acked the
// batch committed and its items are Deleted; otherwise the kernel aborted
// it, and settle settles the items that ENOENT or EBUSY answered and
// returns the messages to send again.
func settle(chunk []batchMsg, errs []error, out []host.HandleOutcome, settled []bool) (again []batchMsg, committed bool) {
	if firstError(errs) == nil {
		for _, m := range chunk {
			out[m.item], settled[m.item] = host.Deleted, true
		}
		return nil, true
	}
	for i, m := range chunk {
		switch {
		case errors.Is(errs[i], syscall.ENOENT):
			out[m.item], settled[m.item] = host.AlreadyGone, true
		case errors.Is(errs[i], syscall.EBUSY):
			out[m.item], settled[m.item] = host.NotDeleted, true
		}
	}
	for _, m := range chunk {
		if !settled[m.item] {
			again = append(again, m)
		}
	}
	return again, false
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// firstHardError returns the first answer that is neither an ack nor
// ENOENT or EBUSY.
func firstHardError(errs []error) error {
	for _, err := range errs {
		if err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EBUSY) {
			return err
		}
	}
	return nil
}
