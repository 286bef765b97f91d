package nfnetlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"
)

// A Teardown asks, before portmap's DEL, which rules of the plugins'
// chains carry the workload's ids. The kernel cannot be asked that: it
// dumps a chain whole, encoding every rule of it, and with a thousand
// attachments on the host that was most of a Teardown's own time
// (7,000 rules, 7–10 ms of the kernel's CPU). A Mirror answers from a
// copy of a few tables' rules, read once by dumps and kept current by
// nf_tables' notifications (the group WatchChanges joins).
//
// Why the copy is exact when asked:
//   - The kernel queues a commit's notifications on every member's
//     socket before the commit returns. A question reads the queue to
//     its end first, so every change committed before the question is
//     in the copy.
//   - A notification is about one rule, by its handle, which nf_tables
//     never gives twice in a table's life (a table deleted and made
//     again starts over, and its deletion comes first). The last
//     notification about a handle says whether the rule is there. So a
//     change applied to a copy that already holds it changes nothing,
//     and the dumps may be taken at any time after joining the group:
//     what was queued since is applied over them. A table's or chain's
//     deletion drops its rules.
//   - A chain renamed moves its rules without a notification about
//     them. The copy knows the handle of each chain it holds rules of
//     (asked by name: the kernel dumps chains only family-wide, every
//     iptables-nft chain of the host with them), and reads the tables
//     again when a chain comes with another name, or with a handle it
//     does not know (a new chain, or one renamed it did not know).
//     portmap's ADD adds its chains again each time: same handle, same
//     name, nothing to do.
//   - When the kernel had no room for a notification (ENOBUFS), or one
//     could not be read whole, the copy is read again by dumps.

// mirrorQueue is the subscription's receive queue. A copy that is not
// asked for a while on a busy host overruns it, and is then read again
// at its next question: the queue bounds what that question reads
// before its dumps.
const mirrorQueue = 2 << 20

// mirrorRules bounds the rules a copy holds (each with its expressions,
// a few hundred bytes): about 2,300 attachments of portmap and the
// masquerade on nftables. On a larger host the copy refuses to answer,
// and the kernel is asked as before, for mirrorPause before it tries
// again.
const mirrorRules = 16384

// mirrorPause is how long a copy that found too many rules refuses
// before it reads the tables again.
const mirrorPause = time.Minute

// Notification types the copy follows beside nftMsgNewRule,
// nftMsgDelRule, nftMsgDelChain and nftMsgDelTable
// (linux/netfilter/nf_tables.h).
const (
	nftMsgDestroyChain = 27
	nftMsgDestroyRule  = 28

	nftaChainHandle = 2
)

// errOtherNetns says a question came from another network namespace than
// the one the copy follows.
var errOtherNetns = errors.New("asked from another network namespace than the copy's")

// errTooMany says the followed tables hold more rules than a copy may.
var errTooMany = fmt.Errorf("the tables hold more than the %d rules a copy may: the kernel is asked", mirrorRules)

// errMirrorClosed says the copy was closed.
var errMirrorClosed = errors.New("the copy of the rules is closed")

// Chain names one chain of one table of a family ("ip", "ip6", "inet").
type Chain struct {
	Family, Table, Name string
}

// notifications is the subscription a Mirror reads: next returns the
// next queued datagram, valid until the next call, and syscall.EAGAIN
// when the queue is empty; truncated says it arrived cut.
type notifications interface {
	next() (datagram []byte, truncated bool, err error)
	close()
}

// Mirror is a copy of the rules of some tables of one network namespace,
// kept current by nf_tables' notifications. Its methods are safe for
// concurrent use; an error means the copy cannot answer, and the caller
// asks the kernel instead.
type Mirror struct {
	mu     sync.Mutex
	events notifications
	dumps  nlSocket
	// sameNetns reports whether the calling thread is in the copy's
	// network namespace.
	sameNetns func() bool
	closeAll  func()
	closed    bool

	tables    map[mirrorTable]bool
	rules     map[mirrorKey]*Rule
	byComment map[string]map[mirrorKey]bool
	chains    map[string]string // one copy of each chain name
	// chainNames is each followed table's chains, by handle: a chain
	// that comes back with another name was renamed. chainsAsked are
	// the names whose handles a read of the tables asks: those of its
	// rules, and every name a notification brought.
	chainNames  map[mirrorTable]map[uint64]string
	chainsAsked map[mirrorTable]map[string]bool
	stale       bool // read the tables again before answering
	reloads     int  // the copy was read by dumps this many times

	maxRules int              // mirrorRules, but in tests
	now      func() time.Time // time.Now, but in tests
	tooMany  time.Time        // when the tables last held more than maxRules
}

// mirrorTable is a table of a family by netfilter protocol number.
type mirrorTable struct {
	proto uint8
	name  string
}

// mirrorKey is where a rule is: nf_tables numbers rules per table.
type mirrorKey struct {
	table  mirrorTable
	handle uint64
}

func newMirror(events notifications, dumps nlSocket) *Mirror {
	return &Mirror{events: events, dumps: dumps, sameNetns: func() bool { return true },
		closeAll: events.close, tables: map[mirrorTable]bool{}, stale: true, maxRules: mirrorRules, now: time.Now}
}

// Close ends the subscription; every later question fails.
func (m *Mirror) Close() {
	m.mu.Lock()
	closed := m.closed
	m.closed = true
	m.mu.Unlock()
	if !closed {
		m.closeAll() // not under mu: closing the file waits for its follower, which takes mu
	}
}

// Find returns the rules of chains whose comment is one of comments, as
// FindRules would, in the order the chains are named, each chain's by
// handle. Each rule's Expr is its own copy.
func (m *Mirror) Find(chains []Chain, comments map[string]bool) ([]Rule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.current(tablesOf(chains)); err != nil {
		return nil, err
	}
	var out []Rule
	for _, c := range chains {
		t, _ := tableOf(c.Family, c.Table)
		start := len(out)
		for comment := range comments {
			for k := range m.byComment[comment] {
				if r := m.rules[k]; k.table == t && r.Chain == c.Name {
					out = append(out, *r)
				}
			}
		}
		slices.SortFunc(out[start:], func(a, b Rule) int { return compareHandles(a.Handle, b.Handle) })
	}
	for i := range out {
		out[i].Expr = slices.Clone(out[i].Expr)
	}
	return out, nil
}

// Any reports whether match holds for a rule of the tables, as AnyRule
// would for each: match sees every rule when it answers false. A
// rule's Expr is valid only during match.
func (m *Mirror) Any(tables []Chain, match func(Rule) bool) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	asked := tablesOf(tables)
	if err := m.current(asked); err != nil {
		return false, err
	}
	for k, r := range m.rules {
		if slices.Contains(asked, k.table) && match(*r) {
			return true, nil
		}
	}
	return false, nil
}

// Reloads says how many times the copy was read by dumps.
func (m *Mirror) Reloads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reloads
}

// tablesOf returns the tables of chains (Name unused), each once.
func tablesOf(chains []Chain) []mirrorTable {
	var out []mirrorTable
	for _, c := range chains {
		if t, ok := tableOf(c.Family, c.Table); ok && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func tableOf(family, table string) (mirrorTable, bool) {
	proto, ok := nfproto[family]
	return mirrorTable{proto, table}, ok
}

// current brings the copy up to every change committed so far, following
// the tables asked from now on. Called with mu held.
func (m *Mirror) current(asked []mirrorTable) error {
	if m.closed {
		return errMirrorClosed
	}
	if !m.sameNetns() {
		return errOtherNetns
	}
	for _, t := range asked {
		if !m.tables[t] {
			m.tables[t] = true
			m.stale = true // a table not followed until now: read it whole
		}
	}
	if !m.tooMany.IsZero() && m.now().Sub(m.tooMany) < mirrorPause {
		return errTooMany // its queue overflows meanwhile: the next read starts over
	}
	if err := m.drain(); err != nil {
		return err
	}
	if m.stale {
		return m.reload()
	}
	return nil
}

// drain applies every queued notification, or marks the copy stale when
// one was lost.
func (m *Mirror) drain() error {
	for {
		datagram, truncated, err := m.events.next()
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ENOBUFS):
			m.stale = true // the kernel dropped what did not fit
			continue
		case err != nil:
			return fmt.Errorf("netlink: reading nf_tables' notifications: %w", err)
		case truncated:
			m.stale = true
			continue
		}
		if m.stale {
			continue // the tables are read whole below: nothing to apply to
		}
		msgs, err := parseNLMessages(datagram)
		if err != nil {
			m.stale = true
			continue
		}
		for _, msg := range msgs {
			if err := m.apply(msg); err != nil {
				m.stale = true
				break
			}
		}
	}
}

// apply applies one notification to the copy.
func (m *Mirror) apply(msg nlMessage) error {
	if msg.typ>>8 != nfnlSubsysNFTables || len(msg.payload) < nfgenmsgLen {
		return nil // another subsystem's, or NLMSG_DONE and the like
	}
	proto := msg.payload[0]
	switch msg.typ & 0xff {
	case nftMsgNewRule, nftMsgDelRule, nftMsgDestroyRule:
		r, t, err := m.ruleOf(proto, msg)
		if err != nil || !m.tables[t] {
			return err
		}
		k := mirrorKey{t, r.Handle}
		m.forget(k)
		if msg.typ&0xff == nftMsgNewRule {
			m.keep(k, r)
		}
	case nftMsgNewChain:
		t, handle, name, err := chainOf(proto, msg)
		if err != nil || !m.tables[t] {
			return err
		}
		known, ok := m.chainNames[t][handle]
		switch {
		case !ok:
			m.askChain(t, name)
			return fmt.Errorf("netlink: chain %s of %s with a handle not known: %w", name, t.name, errRenamed)
		case known != name:
			return fmt.Errorf("netlink: chain %s of %s renamed %s: %w", known, t.name, name, errRenamed)
		}
	case nftMsgDelChain, nftMsgDestroyChain:
		t, handle, chain, err := chainOf(proto, msg)
		if err == nil && m.tables[t] {
			delete(m.chainNames[t], handle)
			m.forgetWhere(func(k mirrorKey, r *Rule) bool { return k.table == t && r.Chain == chain })
		}
		return err
	case nftMsgDelTable, nftMsgDestroyTable:
		var table string
		err := eachAttr(msg.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
			if typ == nftaTableName {
				table = cString(data)
			}
		})
		if t := (mirrorTable{proto, table}); err == nil && m.tables[t] {
			clear(m.chainNames[t])
			m.forgetWhere(func(k mirrorKey, _ *Rule) bool { return k.table == t })
		}
		return err
	}
	return nil
}

// errRenamed says a chain came with another name, or one the copy did
// not know: rules may have moved without a notification.
var errRenamed = errors.New("rules may have moved without a notification")

// askChain has the next read of the tables learn chain's handle.
func (m *Mirror) askChain(t mirrorTable, chain string) {
	if m.chainsAsked == nil {
		m.chainsAsked = map[mirrorTable]map[string]bool{}
	}
	if m.chainsAsked[t] == nil {
		m.chainsAsked[t] = map[string]bool{}
	}
	m.chainsAsked[t][chain] = true
}

// chainOf reads a chain message: its table, handle and name.
func chainOf(proto uint8, msg nlMessage) (t mirrorTable, handle uint64, name string, err error) {
	t.proto = proto
	err = eachAttr(msg.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
		switch typ {
		case nftaChainTable:
			t.name = cString(data)
		case nftaChainHandle:
			if len(data) == 8 {
				handle = binary.BigEndian.Uint64(data)
			}
		case nftaChainName:
			name = cString(data)
		}
	})
	return t, handle, name, err
}

// chainHandle asks nf_tables over s for the handle of chain in table t:
// one lookup by name. found is false when there is no such chain.
func chainHandle(s nlSocket, t mirrorTable, chain string) (handle uint64, found bool, err error) {
	var parseErr error
	seq := nlSeq.Add(1)
	req := nftRequest(nftMsgGetChain, nlmFAck, seq, t.proto, nlAttr{nftaChainTable, strz(t.name)}, nlAttr{nftaChainName, strz(chain)})
	err = exchange(s, req, seq, func(m nlMessage) bool {
		if m.typ != nfnlSubsysNFTables<<8|nftMsgNewChain || len(m.payload) < nfgenmsgLen {
			parseErr = fmt.Errorf("netlink: message type %#x in answer to a chain", m.typ)
			return false
		}
		_, handle, _, parseErr = chainOf(t.proto, m)
		found = parseErr == nil && handle != 0
		return true
	})
	switch {
	case parseErr != nil:
		return 0, false, parseErr
	case errors.Is(err, syscall.ENOENT):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("netlink: looking up chain %s in %s %s: %w", chain, familyOf(t.proto), t.name, err)
	}
	return handle, found, nil
}

// ruleOf reads a rule notification. Its table is read first: a rule of
// a table the copy does not follow costs no copy.
func (m *Mirror) ruleOf(proto uint8, msg nlMessage) (Rule, mirrorTable, error) {
	var table []byte
	err := eachAttr(msg.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
		if typ == nftaRuleTable {
			table = cBytes(data)
		}
	})
	t := mirrorTable{proto, string(table)}
	if err != nil || !m.tables[t] {
		return Rule{}, t, err
	}
	msg.typ = nfnlSubsysNFTables<<8 | nftMsgNewRule // a deletion carries the rule as an addition does
	r, err := parseNLRule(familyOf(proto), msg)
	if err == nil && r.Handle == 0 {
		err = fmt.Errorf("netlink: a rule notification of %s without a handle", table)
	}
	return r, t, err
}

// keep adds r at k, with its own copy of its expressions.
func (m *Mirror) keep(k mirrorKey, r Rule) {
	r.Table = k.table.name
	if c, ok := m.chains[r.Chain]; ok {
		r.Chain = c
	} else {
		m.chains[r.Chain] = r.Chain
	}
	r.Expr = slices.Clone(r.Expr)
	m.rules[k] = &r
	if m.byComment[r.Comment] == nil {
		m.byComment[r.Comment] = map[mirrorKey]bool{}
	}
	m.byComment[r.Comment][k] = true
}

// forget removes the rule at k, if the copy has one.
func (m *Mirror) forget(k mirrorKey) {
	r, ok := m.rules[k]
	if !ok {
		return
	}
	delete(m.rules, k)
	if ks := m.byComment[r.Comment]; ks != nil {
		delete(ks, k)
		if len(ks) == 0 {
			delete(m.byComment, r.Comment)
		}
	}
}

func (m *Mirror) forgetWhere(gone func(mirrorKey, *Rule) bool) {
	for k, r := range m.rules {
		if gone(k, r) {
			m.forget(k)
		}
	}
}

// reload reads the followed tables whole. The queue was read to its end
// just before: what it held is older than the dumps.
func (m *Mirror) reload() error {
	m.rules, m.byComment, m.chains = map[mirrorKey]*Rule{}, map[string]map[mirrorKey]bool{}, map[string]string{}
	m.chainNames = map[mirrorTable]map[uint64]string{}
	m.reloads++
	tables := make([]mirrorTable, 0, len(m.tables))
	for t := range m.tables {
		tables = append(tables, t)
	}
	for _, t := range tables {
		over := false
		_, err := dumpRules(m.dumps, familyOf(t.proto), t.name, "", func() {
			over = false
			m.forgetWhere(func(k mirrorKey, _ *Rule) bool { return k.table == t })
		}, func(r Rule) bool {
			if len(m.rules) < m.maxRules {
				m.keep(mirrorKey{t, r.Handle}, r)
			} else {
				over = true
			}
			return false // a dump stopped half way would leave the socket busy
		})
		if err == nil && over {
			m.tooMany, err = m.now(), errTooMany
		}
		if err == nil {
			m.chainNames[t], err = m.chainHandles(t)
		}
		if err != nil {
			m.rules = map[mirrorKey]*Rule{}
			m.byComment = map[string]map[mirrorKey]bool{}
			return err // still stale: the next question reads them again
		}
	}
	m.stale, m.tooMany = false, time.Time{}
	return nil
}

// chainHandles asks the handle of each chain of t the copy holds rules
// of, or was told of. A chain renamed after its rules were read is asked
// by its old name and not found: its notification then comes with a
// handle not known, and the tables are read again.
func (m *Mirror) chainHandles(t mirrorTable) (map[uint64]string, error) {
	for _, r := range m.rules {
		if r.Table == t.name {
			m.askChain(t, r.Chain)
		}
	}
	handles := map[uint64]string{}
	for name := range m.chainsAsked[t] {
		h, found, err := chainHandle(m.dumps, t, name)
		if err != nil {
			return nil, err
		}
		if found {
			handles[h] = name
		}
	}
	return handles, nil
}

// familyOf is nfproto's inverse.
func familyOf(proto uint8) string {
	if name, ok := nfFamilyName[proto]; ok {
		return name
	}
	return fmt.Sprintf("family %d", proto)
}

func compareHandles(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
