package nfnetlink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"
)

// A Teardown must tell whether a few chains exist, and whether any rule of
// a shared chain could be its own, at a cost that does not grow with the
// host's ruleset. Every command-line tool pays for the whole ruleset (even
// `iptables -S <chain>` on the nf_tables backend reads the table's chain
// list), and starting a process alone costs milliseconds. nf_tables
// answers both questions over netlink directly: a chain by name is a
// hash lookup in the kernel, the rules of one table come without any
// decoding into text. This file holds the messages (read-only) and the
// two questions; the kernel's socket is in conn_linux.go.

// nf_tables netlink constants (linux/netfilter/nf_tables.h, nfnetlink.h).
const (
	nfnlSubsysNFTables = 10
	nfnetlinkV0        = 0

	nftMsgNewTable = 0
	nftMsgGetTable = 1
	nftMsgNewChain = 3
	nftMsgGetChain = 4
	nftMsgNewRule  = 6
	nftMsgGetRule  = 7

	nftaTableName       = 1
	nftaChainTable      = 1
	nftaChainName       = 3
	nftaRuleTable       = 1
	nftaRuleChain       = 2
	nftaRuleHandle      = 3
	nftaRuleExpressions = 4
	nftaRuleUserdata    = 7

	nftUdataRuleComment = 0 // libnftnl's NFTNL_UDATA_RULE_COMMENT

	nlmsgHeaderLen = 16
	nfgenmsgLen    = 4
	nlaHeaderLen   = 4
	nlaTypeMask    = 0x3fff // without NLA_F_NESTED and NLA_F_NET_BYTEORDER

	nlmsgError   = 2
	nlmsgDone    = 3
	nlmFRequest  = 0x1
	nlmFAck      = 0x4
	nlmFDumpIntr = 0x10
	nlmFDump     = 0x300
)

// dumpAttempts bounds the retries of a dump that a concurrent change
// interrupted.
const dumpAttempts = 5

// nlSeq numbers requests; replies are matched to them by it.
var nlSeq atomic.Uint32

// nfproto maps nft's family names to netfilter's protocol numbers;
// iptables-nft keeps iptables' tables in "ip" and ip6tables' in "ip6".
var nfproto = map[string]uint8{"inet": 1, "ip": 2, "ip6": 10}

// errDumpInterrupted says the ruleset changed during a dump; the dump is
// incomplete and must be taken again.
var errDumpInterrupted = errors.New("nf_tables changed during the dump")

// errNotARule says a rule dump's reply held something else.
var errNotARule = errors.New("not a rule")

// errNoChain says a question that reads one chain was asked of none.
var errNoChain = errors.New("no chain named: a search reads one chain at a time")

// errStopped ends an exchange whose reader has what it needs.
var errStopped = errors.New("stopped by the reader")

// nlSocket is what a question to nf_tables needs of a netlink socket. The
// kernel's is in conn_linux.go; tests replay datagrams.
type nlSocket interface {
	send(req []byte) error
	// receive returns the next datagram, valid until the next receive.
	receive() ([]byte, error)
}

// exchange sends req (numbered seq) and calls visit with each message of
// the reply, up to NLMSG_DONE (a dump) or the ack. A message's bytes are
// valid only during the call; visit returns false to stop reading.
func exchange(s nlSocket, req []byte, seq uint32, visit func(nlMessage) bool) error {
	if err := s.send(req); err != nil {
		return err
	}
	interrupted := false
	for {
		datagram, err := s.receive()
		if err != nil {
			return err
		}
		msgs, err := parseNLMessages(datagram)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.seq != seq {
				continue // a late answer to an earlier question
			}
			interrupted = interrupted || m.flags&nlmFDumpIntr != 0
			switch m.typ {
			case nlmsgDone:
				if err := doneErr(m); err != nil {
					return err // the dump failed in the kernel: what came is not all
				}
				return dumpErr(interrupted)
			case nlmsgError:
				if err := errnoOf(m); err != nil {
					return err
				}
				return dumpErr(interrupted)
			}
			if !visit(m) {
				return errStopped
			}
		}
	}
}

func dumpErr(interrupted bool) error {
	if interrupted {
		return errDumpInterrupted
	}
	return nil
}

// probeChain asks nf_tables over s whether chain exists in table of
// family ("ip", "ip6", "inet"): one lookup by name, whatever the table
// holds.
func probeChain(s nlSocket, family, table, chain string) (bool, error) {
	proto, ok := nfproto[family]
	if !ok {
		return false, fmt.Errorf("netlink: unknown nftables family %q", family)
	}
	seq := nlSeq.Add(1)
	req := nftRequest(nftMsgGetChain, nlmFAck, seq, proto,
		nlAttr{nftaChainTable, strz(table)}, nlAttr{nftaChainName, strz(chain)})
	err := exchange(s, req, seq, func(nlMessage) bool { return true })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.ENOENT):
		return false, nil // no such chain, or no such table
	}
	return false, fmt.Errorf("netlink: looking up chain %s in %s %s: %w", chain, family, table, err)
}

// lookupRule asks nf_tables over s for the rule of family's table and
// chain with handle. The kernel walks the chain to find the handle but
// sends that rule alone: none of the others is encoded, copied or parsed,
// as a dump's are. found is false when there is no such rule, chain or
// table.
func lookupRule(s nlSocket, family, table, chain string, handle uint64) (rule Rule, found bool, err error) {
	proto, ok := nfproto[family]
	if !ok {
		return Rule{}, false, fmt.Errorf("netlink: unknown nftables family %q", family)
	}
	seq := nlSeq.Add(1)
	req := nftRequest(nftMsgGetRule, nlmFAck, seq, proto, nlAttr{nftaRuleTable, strz(table)},
		nlAttr{nftaRuleChain, strz(chain)}, nlAttr{nftaRuleHandle, binary.BigEndian.AppendUint64(nil, handle)})
	var parseErr error
	err = exchange(s, req, seq, func(m nlMessage) bool {
		r, err := parseNLRule(family, m)
		switch {
		case err != nil:
			parseErr = err
		case r.Handle == handle && r.in(table, chain):
			rule, found = r, true
			rule.Expr = bytes.Clone(r.Expr)
		}
		return true
	})
	switch {
	case parseErr != nil:
		return Rule{}, false, parseErr
	case errors.Is(err, syscall.ENOENT):
		return Rule{}, false, nil
	case err != nil:
		return Rule{}, false, fmt.Errorf("netlink: looking up rule %d of chain %s in %s %s: %w", handle, chain, family, table, err)
	}
	return rule, found, nil
}

// anyRule reports whether match holds for a rule of table of family (of
// chain only, unless chain is ""), reading the rules over s as the kernel
// dumps them and stopping at the first match. A rule's bytes are valid
// only during match. A table or chain that does not exist has no rules; a
// dump that a change interrupted is taken again, since a rule it skipped
// might have matched.
func anyRule(s nlSocket, family, table, chain string, match func(Rule) bool) (bool, error) {
	return dumpRules(s, family, table, chain, func() {}, match)
}

// listRules returns every rule of table of family, each with its own copy
// of its expressions, in the kernel's order (chain by chain, as nft lists
// them). A table that does not exist has none; a dump that a change
// interrupted is taken again from the start.
func listRules(s nlSocket, family, table string) ([]Rule, error) {
	var rules []Rule
	err := eachRule(s, family, table, func() { rules = rules[:0] }, func(r Rule) error {
		r.Expr = bytes.Clone(r.Expr)
		rules = append(rules, r)
		return nil
	})
	return rules, err
}

// eachRule calls visit with every rule of table of family, in the
// kernel's order, without keeping any: a rule's Expr is valid only
// during visit, so a caller that keeps what it reads of a rule (a sweep's
// listing of tens of thousands) holds no copy of every rule's bytes
// besides. begin is called before each attempt: a dump a change
// interrupted is taken again from the start, and what visit was given
// before is to be forgotten. A table that does not exist has no rules;
// an error of visit ends the dump and is returned.
func eachRule(s nlSocket, family, table string, begin func(), visit func(Rule) error) error {
	_, err := dumpMessages(s, family, table, "", begin, func(m nlMessage) (bool, error) {
		r, err := parseNLRule(family, m)
		if err != nil || !r.in(table, "") {
			return false, err
		}
		return false, visit(r)
	})
	return err
}

// dumpRules dumps the rules of table of family (of chain only, unless
// chain is "") over s, calling begin before each attempt and visit with
// each rule until it returns true; it reports whether one did.
func dumpRules(s nlSocket, family, table, chain string, begin func(), visit func(Rule) bool) (bool, error) {
	return dumpMessages(s, family, table, chain, begin, func(m nlMessage) (bool, error) {
		r, err := parseNLRule(family, m)
		if err != nil || !r.in(table, chain) {
			return false, err
		}
		return visit(r), nil
	})
}

// findRules returns the rules of chain of table of family whose comment
// is one of comments, each with its own copy of its expressions. The
// kernel dumps that chain alone; of each rule the comment is read first,
// and a rule with another comment is skipped without a string or a copy
// made of it. A table or chain that does not exist has none; a dump that
// a change interrupted is taken again from the start.
func findRules(s nlSocket, family, table, chain string, comments map[string]bool) ([]Rule, error) {
	if chain == "" {
		return nil, fmt.Errorf("netlink: finding rules of %s %s: %w", family, table, errNoChain)
	}
	var rules []Rule
	_, err := dumpMessages(s, family, table, chain, func() { rules = rules[:0] }, func(m nlMessage) (bool, error) {
		if ok, err := commentIn(m, table, chain, comments); !ok || err != nil {
			return false, err
		}
		r, err := parseNLRule(family, m)
		if err != nil {
			return false, err
		}
		r.Expr = bytes.Clone(r.Expr)
		rules = append(rules, r)
		return false, nil
	})
	return rules, err
}

// commentIn reports whether the rule m carries is of table and chain and
// its comment one of comments, reading its attributes in place.
func commentIn(m nlMessage, table, chain string, comments map[string]bool) (bool, error) {
	if m.typ != nfnlSubsysNFTables<<8|nftMsgNewRule || len(m.payload) < nfgenmsgLen {
		return false, fmt.Errorf("netlink: message type %#x: %w", m.typ, errNotARule)
	}
	var inTable, inChain bool
	var comment []byte
	err := eachAttr(m.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
		switch typ {
		case nftaRuleTable:
			inTable = string(cBytes(data)) == table
		case nftaRuleChain:
			inChain = string(cBytes(data)) == chain
		case nftaRuleUserdata:
			comment = udataCommentBytes(data)
		}
	})
	return err == nil && inTable && inChain && comments[string(comment)], err
}

// dumpMessages dumps the rules of table of family (of chain only, unless
// chain is "") over s, calling begin before each attempt and visit with
// each message until it returns true or an error; it reports whether it
// returned true.
func dumpMessages(s nlSocket, family, table, chain string, begin func(), visit func(nlMessage) (bool, error)) (bool, error) {
	proto, ok := nfproto[family]
	if !ok {
		return false, fmt.Errorf("netlink: unknown nftables family %q", family)
	}
	attrs := []nlAttr{{nftaRuleTable, strz(table)}}
	if chain != "" {
		attrs = append(attrs, nlAttr{nftaRuleChain, strz(chain)})
	}
	for attempt := 1; ; attempt++ {
		begin()
		var parseErr error
		seq := nlSeq.Add(1)
		err := exchange(s, nftRequest(nftMsgGetRule, nlmFDump, seq, proto, attrs...), seq, func(m nlMessage) bool {
			stop, err := visit(m)
			if err != nil {
				parseErr = err
				return false
			}
			return !stop
		})
		switch {
		case parseErr != nil:
			return false, parseErr
		case errors.Is(err, errStopped):
			return true, nil
		case errors.Is(err, syscall.ENOENT):
			return false, nil
		case errors.Is(err, errDumpInterrupted) && attempt < dumpAttempts:
			continue // the dump ran to its end: the socket is ready for the next
		case err != nil:
			return false, fmt.Errorf("netlink: reading the rules of %s %s: %w", family, table, err)
		}
		return false, nil
	}
}

// Rule is one rule as nf_tables reports it: where it is, its handle,
// its comment, and its expressions undecoded.
type Rule struct {
	Family       string
	Table, Chain string
	Handle       uint64
	Comment      string
	Expr         []byte
}

// Mentions reports whether any of addrs appears, byte for byte, in the
// rule's expressions. A rule that matches or rewrites an address carries
// it in some expression's data, so false proves the rule is not about
// any of them; true may be a coincidence and is settled by a real listing.
func (r Rule) Mentions(addrs [][]byte) bool {
	for _, a := range addrs {
		if len(a) > 0 && bytes.Contains(r.Expr, a) {
			return true
		}
	}
	return false
}

// in reports whether the rule is of table (and of chain, unless chain is
// ""): a kernel that does not filter dumps sends every rule of the family.
func (r Rule) in(table, chain string) bool {
	return r.Table == table && (chain == "" || r.Chain == chain)
}

// nlAttr is one netlink attribute.
type nlAttr struct {
	typ  uint16
	data []byte
}

// nlMessage is one netlink message of a reply.
type nlMessage struct {
	typ, flags uint16
	seq        uint32
	payload    []byte
}

// nftRequest encodes one nf_tables request of msg for family.
func nftRequest(msg uint16, flags uint16, seq uint32, family uint8, attrs ...nlAttr) []byte {
	return appendNFTRequest(make([]byte, 0, 64), msg, flags, seq, family, attrs...)
}

// appendNFTRequest is nftRequest appending to b: a batch is encoded in
// one buffer.
func appendNFTRequest(b []byte, msg uint16, flags uint16, seq uint32, family uint8, attrs ...nlAttr) []byte {
	start := len(b)
	b = append(b, make([]byte, nlmsgHeaderLen)...)
	b = append(b, family, nfnetlinkV0, 0, 0) // nfgenmsg; res_id 0
	for _, a := range attrs {
		n := nlaHeaderLen + len(a.data)
		b = binary.NativeEndian.AppendUint16(b, uint16(n))
		b = binary.NativeEndian.AppendUint16(b, a.typ)
		b = append(b, a.data...)
		b = append(b, make([]byte, align4(n)-n)...)
	}
	h := b[start:]
	binary.NativeEndian.PutUint32(h[0:], uint32(len(h)))
	binary.NativeEndian.PutUint16(h[4:], nfnlSubsysNFTables<<8|msg)
	binary.NativeEndian.PutUint16(h[6:], flags|nlmFRequest)
	binary.NativeEndian.PutUint32(h[8:], seq)
	return b
}

// strz is a netlink string attribute's data.
func strz(s string) []byte { return append([]byte(s), 0) }

func align4(n int) int { return (n + 3) &^ 3 }

// parseNLMessages splits one datagram into its messages.
func parseNLMessages(b []byte) ([]nlMessage, error) {
	var msgs []nlMessage
	for len(b) >= nlmsgHeaderLen {
		n := int(binary.NativeEndian.Uint32(b[0:]))
		if n < nlmsgHeaderLen || n > len(b) {
			return nil, fmt.Errorf("netlink: message length %d does not fit the %d bytes left", n, len(b))
		}
		msgs = append(msgs, nlMessage{
			typ:     binary.NativeEndian.Uint16(b[4:]),
			flags:   binary.NativeEndian.Uint16(b[6:]),
			seq:     binary.NativeEndian.Uint32(b[8:]),
			payload: b[nlmsgHeaderLen:n],
		})
		b = b[min(align4(n), len(b)):]
	}
	return msgs, nil
}

// errnoOf returns the error an NLMSG_ERROR carries; nil is an ack.
func errnoOf(m nlMessage) error {
	if len(m.payload) < 4 {
		return errors.New("netlink: short error message")
	}
	if code := int32(binary.NativeEndian.Uint32(m.payload)); code != 0 {
		return syscall.Errno(-code)
	}
	return nil
}

// doneErr returns the error an NLMSG_DONE carries: a dump that failed
// part way ends with the kernel's error code instead of 0.
func doneErr(m nlMessage) error {
	if len(m.payload) >= 4 {
		if code := int32(binary.NativeEndian.Uint32(m.payload)); code < 0 {
			return syscall.Errno(-code)
		}
	}
	return nil
}

// eachAttr calls fn with each attribute of b.
func eachAttr(b []byte, fn func(typ uint16, data []byte)) error {
	for len(b) >= nlaHeaderLen {
		n := int(binary.NativeEndian.Uint16(b[0:]))
		if n < nlaHeaderLen || n > len(b) {
			return fmt.Errorf("netlink: attribute length %d does not fit the %d bytes left", n, len(b))
		}
		fn(binary.NativeEndian.Uint16(b[2:])&nlaTypeMask, b[nlaHeaderLen:n])
		b = b[min(align4(n), len(b)):]
	}
	return nil
}

// parseNLRule reads a NEWRULE message of family. The rule's expressions
// are m's bytes, not a copy.
func parseNLRule(family string, m nlMessage) (Rule, error) {
	if m.typ != nfnlSubsysNFTables<<8|nftMsgNewRule || len(m.payload) < nfgenmsgLen {
		return Rule{}, fmt.Errorf("netlink: message type %#x: %w", m.typ, errNotARule)
	}
	r := Rule{Family: family}
	err := eachAttr(m.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
		switch typ {
		case nftaRuleTable:
			r.Table = cString(data)
		case nftaRuleChain:
			r.Chain = cString(data)
		case nftaRuleHandle:
			if len(data) == 8 {
				r.Handle = binary.BigEndian.Uint64(data)
			}
		case nftaRuleExpressions:
			r.Expr = data
		case nftaRuleUserdata:
			r.Comment = udataComment(data)
		}
	})
	return r, err
}

// udataComment returns the comment in a rule's user data (udataCommentBytes).
func udataComment(b []byte) string { return string(udataCommentBytes(b)) }

// udataCommentBytes returns the comment in a rule's user data, in place:
// type-length-value records of one byte each, as nft and libnftnl write
// them; nil when there is none.
func udataCommentBytes(b []byte) []byte {
	for len(b) >= 2 {
		typ, n := b[0], int(b[1])
		if 2+n > len(b) {
			return nil
		}
		if typ == nftUdataRuleComment {
			return cBytes(b[2 : 2+n])
		}
		b = b[2+n:]
	}
	return nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string { return string(cBytes(b)) }

// cBytes returns b up to its first NUL, in place.
func cBytes(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return b
}

// AddrBytes returns each address as it appears in a rule: 4 or 16 bytes in
// network order.
func AddrBytes(addrs []netip.Addr) [][]byte {
	raw := make([][]byte, len(addrs))
	for i, a := range addrs {
		raw[i] = a.Unmap().AsSlice()
	}
	return raw
}
