package nfnetlink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
)

// replaySocket answers each request with the datagrams its script returns
// for it, as the kernel would, and records the requests. Like the
// kernel's socket it reads every datagram into one buffer, and spoils
// what the last receive returned, so a reader keeping a message too long
// sees garbage.
type replaySocket struct {
	// script returns the datagrams answering the n-th request (from 0).
	script  func(req nlMessage, n int) [][]byte
	sent    []nlMessage
	unread  [][]byte
	readErr error
	buf     []byte
}

func (s *replaySocket) send(req []byte) error {
	msgs, err := parseNLMessages(req)
	if err != nil || len(msgs) != 1 {
		return errors.New("replay: the request is not one netlink message")
	}
	s.unread = append(s.unread, s.script(msgs[0], len(s.sent))...)
	s.sent = append(s.sent, msgs[0])
	return nil
}

func (s *replaySocket) receive() ([]byte, error) {
	if s.readErr != nil {
		return nil, s.readErr
	}
	if len(s.unread) == 0 {
		return nil, errors.New("replay: read past the end of the reply")
	}
	for i := range s.buf {
		s.buf[i] = 0xff
	}
	s.buf = append(s.buf[:0], s.unread[0]...)
	s.unread = s.unread[1:]
	return s.buf, nil
}

// attrsOf returns a request's attributes as strings, by type.
func attrsOf(t *testing.T, req nlMessage) map[uint16]string {
	t.Helper()
	attrs := map[uint16]string{}
	if err := eachAttr(req.payload[nfgenmsgLen:], func(typ uint16, data []byte) { attrs[typ] = cString(data) }); err != nil {
		t.Fatal(err)
	}
	return attrs
}

func negErrno(e syscall.Errno) []byte {
	return binary.NativeEndian.AppendUint32(nil, uint32(-int32(e)))
}

func ruleDatagram(seq uint32, flags uint16, table, chain, comment string) []byte {
	udata := append([]byte{nftUdataRuleComment, byte(len(comment) + 1)}, strz(comment)...)
	payload := append([]byte{2, 0, 0, 0}, attr(nftaRuleTable, strz(table))...)
	payload = append(payload, attr(nftaRuleChain, strz(chain))...)
	payload = append(payload, attr(nftaRuleUserdata, udata)...)
	return nlMsg(nfnlSubsysNFTables<<8|nftMsgNewRule, 2|flags, seq, payload)
}

func doneDatagram(seq uint32, flags uint16, errno syscall.Errno) []byte {
	return nlMsg(nlmsgDone, 2|flags, seq, negErrno(errno))
}

func errorDatagram(seq uint32, errno syscall.Errno) []byte {
	return nlMsg(nlmsgError, 0, seq, append(negErrno(errno), make([]byte, nlmsgHeaderLen)...))
}

func joined(datagrams ...[]byte) []byte {
	var b []byte
	for _, d := range datagrams {
		b = append(b, d...)
	}
	return b
}

func TestAnyRuleReadsTheKernelsDumpAsItComes(t *testing.T) {
	const table, chain = "cni_hostport", "hostports"
	always := func(f func(seq uint32) [][]byte) func(nlMessage, int) [][]byte {
		return func(req nlMessage, _ int) [][]byte { return f(req.seq) }
	}
	for _, tc := range []struct {
		name     string
		script   func(req nlMessage, n int) [][]byte
		readErr  error
		want     bool
		wantErr  error
		requests int
		unread   int
	}{
		{
			name: "a match in a later datagram ends the reading there",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{
					joined(ruleDatagram(seq, 0, table, chain, "a"), ruleDatagram(seq, 0, table, chain, "b")),
					ruleDatagram(seq, 0, table, chain, "web-1"),
					doneDatagram(seq, 0, 0),
				}
			}),
			want: true, requests: 1, unread: 1,
		},
		{
			name: "no match reads up to NLMSG_DONE",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{ruleDatagram(seq, 0, table, chain, "a"), joined(ruleDatagram(seq, 0, table, chain, "b"), doneDatagram(seq, 0, 0))}
			}),
			want: false, requests: 1,
		},
		{
			name: "rules of other tables and chains are not the question",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{joined(
					ruleDatagram(seq, 0, "nat", chain, "web-1"),
					ruleDatagram(seq, 0, table, "other", "web-1"),
					doneDatagram(seq, 0, 0))}
			}),
			want: false, requests: 1,
		},
		{
			name: "late answers to an earlier question are passed over",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{
					joined(ruleDatagram(seq-1, 0, table, chain, "web-1"), doneDatagram(seq-1, 0, 0)),
					doneDatagram(seq, 0, 0),
				}
			}),
			want: false, requests: 1,
		},
		{
			name: "a dump a change interrupted is taken again",
			script: func(req nlMessage, n int) [][]byte {
				if n == 0 {
					return [][]byte{joined(ruleDatagram(req.seq, nlmFDumpIntr, table, chain, "a"), doneDatagram(req.seq, nlmFDumpIntr, 0))}
				}
				return [][]byte{joined(ruleDatagram(req.seq, 0, table, chain, "web-1"), doneDatagram(req.seq, 0, 0))}
			},
			want: true, requests: 2,
		},
		{
			name: "a dump interrupted at every attempt is an error",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{joined(ruleDatagram(seq, 0, table, chain, "a"), doneDatagram(seq, nlmFDumpIntr, 0))}
			}),
			wantErr: errDumpInterrupted, requests: dumpAttempts,
		},
		{
			name:   "a table that does not exist has no rules",
			script: always(func(seq uint32) [][]byte { return [][]byte{errorDatagram(seq, syscall.ENOENT)} }),
			want:   false, requests: 1,
		},
		{
			name: "a dump that failed in the kernel is an error, not an answer",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{joined(ruleDatagram(seq, 0, table, chain, "a"), doneDatagram(seq, 0, syscall.ENOBUFS))}
			}),
			wantErr: syscall.ENOBUFS, requests: 1,
		},
		{
			name:    "a refusal is an error",
			script:  always(func(seq uint32) [][]byte { return [][]byte{errorDatagram(seq, syscall.EPERM)} }),
			wantErr: syscall.EPERM, requests: 1,
		},
		{
			name: "a message that is not a rule is an error",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{nlMsg(nfnlSubsysNFTables<<8|nftMsgNewChain, 2, seq, []byte{2, 0, 0, 0})}
			}),
			wantErr: errNotARule, requests: 1, unread: 0,
		},
		{
			name:    "a failed read is an error",
			script:  always(func(uint32) [][]byte { return nil }),
			readErr: syscall.EAGAIN, wantErr: syscall.EAGAIN, requests: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &replaySocket{script: tc.script, readErr: tc.readErr}
			got, err := anyRule(s, "ip", table, chain, func(r Rule) bool { return r.Comment == "web-1" })
			switch {
			case tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || got):
				t.Fatalf("anyRule = %v, %v; want an error that is %v", got, err, tc.wantErr)
			case tc.wantErr == nil && (err != nil || got != tc.want):
				t.Fatalf("anyRule = %v, %v; want %v", got, err, tc.want)
			}
			if len(s.sent) != tc.requests || len(s.unread) != tc.unread {
				t.Errorf("%d requests sent, %d datagrams unread; want %d, %d", len(s.sent), len(s.unread), tc.requests, tc.unread)
			}
			for _, req := range s.sent {
				if req.typ != nfnlSubsysNFTables<<8|nftMsgGetRule || req.flags != nlmFRequest|nlmFDump || req.payload[0] != nfproto["ip"] {
					t.Errorf("request = type %#x flags %#x family %d; want a GETRULE dump of ip", req.typ, req.flags, req.payload[0])
				}
				if a := attrsOf(t, req); len(a) != 2 || a[nftaRuleTable] != table || a[nftaRuleChain] != chain {
					t.Errorf("request attributes = %q; want table %s, chain %s", a, table, chain)
				}
			}
		})
	}
}

func TestProbeChainAsksForOneChainByName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reply   func(seq uint32) [][]byte
		want    bool
		wantErr error
	}{
		{"an ack is a chain that exists", func(seq uint32) [][]byte {
			return [][]byte{nlMsg(nfnlSubsysNFTables<<8|nftMsgNewChain, 0, seq, []byte{2, 0, 0, 0}), errorDatagram(seq, 0)}
		}, true, nil},
		{"ENOENT is a chain (or table) that does not exist", func(seq uint32) [][]byte { return [][]byte{errorDatagram(seq, syscall.ENOENT)} }, false, nil},
		{"a late answer to an earlier question is passed over", func(seq uint32) [][]byte {
			return [][]byte{errorDatagram(seq-1, syscall.ENOENT), errorDatagram(seq, 0)}
		}, true, nil},
		{"any other refusal is an error", func(seq uint32) [][]byte { return [][]byte{errorDatagram(seq, syscall.EPERM)} }, false, syscall.EPERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &replaySocket{script: func(req nlMessage, _ int) [][]byte { return tc.reply(req.seq) }}
			got, err := probeChain(s, "ip6", "nat", "CNI-abc")
			if (tc.wantErr == nil && err != nil) || !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Fatalf("probeChain = %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
			req := s.sent[0]
			a := attrsOf(t, req)
			if req.typ != nfnlSubsysNFTables<<8|nftMsgGetChain || req.flags != nlmFRequest|nlmFAck || req.payload[0] != nfproto["ip6"] ||
				len(a) != 2 || a[nftaChainTable] != "nat" || a[nftaChainName] != "CNI-abc" {
				t.Errorf("request = type %#x flags %#x family %d attributes %q; want GETCHAIN (acked) ip6 nat CNI-abc", req.typ, req.flags, req.payload[0], a)
			}
		})
	}
}

func TestLookupRuleAsksForOneRuleByHandle(t *testing.T) {
	raw := []byte{198, 18, 0, 7}
	for _, tc := range []struct {
		name      string
		reply     func(seq uint32) [][]byte
		wantFound bool
		wantErr   error
	}{
		{"the rule answered is the rule looked up", func(seq uint32) [][]byte {
			return [][]byte{fakeRuleMsg(seq, 0, "cni_hostport", "hostports", fakeRule{7, "web-1", raw}), errorDatagram(seq, 0)}
		}, true, nil},
		{"ENOENT is a rule, chain or table that does not exist", func(seq uint32) [][]byte { return [][]byte{errorDatagram(seq, syscall.ENOENT)} }, false, nil},
		{"a rule of another handle is not the one looked up", func(seq uint32) [][]byte {
			return [][]byte{fakeRuleMsg(seq, 0, "cni_hostport", "hostports", fakeRule{8, "web-1", raw}), errorDatagram(seq, 0)}
		}, false, nil},
		{"a rule of another chain is not the one looked up", func(seq uint32) [][]byte {
			return [][]byte{fakeRuleMsg(seq, 0, "cni_hostport", "masquerading", fakeRule{7, "web-1", raw}), errorDatagram(seq, 0)}
		}, false, nil},
		{"any other refusal is an error", func(seq uint32) [][]byte { return [][]byte{errorDatagram(seq, syscall.EPERM)} }, false, syscall.EPERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &replaySocket{script: func(req nlMessage, _ int) [][]byte { return tc.reply(req.seq) }}
			r, found, err := lookupRule(s, "ip", "cni_hostport", "hostports", 7)
			if (tc.wantErr == nil && err != nil) || !errors.Is(err, tc.wantErr) || found != tc.wantFound {
				t.Fatalf("lookupRule = %v, %v; want %v, %v", found, err, tc.wantFound, tc.wantErr)
			}
			if found && (r.Handle != 7 || r.Comment != "web-1" || r.Chain != "hostports" || !bytes.Equal(r.Expr, raw)) {
				t.Errorf("rule = %+v; want handle 7 of hostports, comment web-1, its expressions", r)
			}
			req := s.sent[0]
			a := attrsOf(t, req)
			h, _ := handleOf(req)
			if req.typ != nfnlSubsysNFTables<<8|nftMsgGetRule || req.flags != nlmFRequest|nlmFAck || req.payload[0] != nfproto["ip"] ||
				len(a) != 3 || a[nftaRuleTable] != "cni_hostport" || a[nftaRuleChain] != "hostports" || h != 7 {
				t.Errorf("request = type %#x flags %#x family %d attributes %q; want GETRULE (acked, no dump) ip cni_hostport hostports handle 7", req.typ, req.flags, req.payload[0], a)
			}
		})
	}
}

func TestAnyRuleWithoutAChainAsksForTheWholeTable(t *testing.T) {
	s := &replaySocket{script: func(req nlMessage, _ int) [][]byte {
		return [][]byte{joined(ruleDatagram(req.seq, 0, "cni_hostport", "masquerading", "web-1"), doneDatagram(req.seq, 0, 0))}
	}}
	got, err := anyRule(s, "inet", "cni_hostport", "", func(r Rule) bool { return r.Comment == "web-1" })
	if err != nil || !got {
		t.Fatalf("anyRule = %v, %v; want true (a rule of any chain of the table counts)", got, err)
	}
	if a := attrsOf(t, s.sent[0]); len(a) != 1 || a[nftaRuleTable] != "cni_hostport" || s.sent[0].payload[0] != nfproto["inet"] {
		t.Errorf("request family %d, attributes %q; want inet, the table alone", s.sent[0].payload[0], a)
	}
}

func TestAnUnknownFamilyIsRefusedBeforeAnythingIsSent(t *testing.T) {
	s := &replaySocket{script: func(nlMessage, int) [][]byte { return nil }}
	if _, err := probeChain(s, "arp", "filter", "x"); err == nil {
		t.Error("probeChain accepted family arp")
	}
	if _, err := anyRule(s, "bridge", "filter", "", func(Rule) bool { return true }); err == nil {
		t.Error("anyRule accepted family bridge")
	}
	if len(s.sent) != 0 {
		t.Errorf("%d requests sent for unknown families", len(s.sent))
	}
}

func TestFindRulesReadsOneChainAndKeepsOnlyTheRulesOfItsComments(t *testing.T) {
	const table, chain = "cni_hostport", "hostports"
	comments := map[string]bool{"web-1": true, "web-2": true}
	rule := func(seq uint32, flags uint16, table, chain, comment string, expr byte) []byte {
		m := ruleDatagram(seq, flags, table, chain, comment)
		payload := append(m[nlmsgHeaderLen:len(m):len(m)], attr(nftaRuleExpressions, []byte{expr, expr, expr, expr})...)
		return nlMsg(nfnlSubsysNFTables<<8|nftMsgNewRule, 2|flags, seq, payload)
	}
	always := func(f func(seq uint32) [][]byte) func(nlMessage, int) [][]byte {
		return func(req nlMessage, _ int) [][]byte { return f(req.seq) }
	}
	for _, tc := range []struct {
		name     string
		script   func(req nlMessage, n int) [][]byte
		want     []string // comment:expression byte of each rule found
		wantErr  error
		requests int
	}{
		{
			name: "the rules of its comments are found, each with its expressions, the others skipped",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{
					joined(rule(seq, 0, table, chain, "a", 1), rule(seq, 0, table, chain, "web-1", 2)),
					joined(rule(seq, 0, table, chain, "web-2", 3), rule(seq, 0, table, chain, "web-10", 4), doneDatagram(seq, 0, 0)),
				}
			}),
			want: []string{"web-1:2", "web-2:3"}, requests: 1,
		},
		{
			name: "a comment that only begins like one of its own is another's",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{joined(rule(seq, 0, table, chain, "web-1x", 1), rule(seq, 0, table, chain, "web", 2), doneDatagram(seq, 0, 0))}
			}),
			requests: 1,
		},
		{
			name: "rules of other tables and chains, from a kernel that does not filter, are not found",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{joined(rule(seq, 0, "nat", chain, "web-1", 1), rule(seq, 0, table, "masquerading", "web-1", 2), doneDatagram(seq, 0, 0))}
			}),
			requests: 1,
		},
		{
			name: "a dump a change interrupted is taken again, what the first attempt found forgotten",
			script: func(req nlMessage, n int) [][]byte {
				if n == 0 {
					return [][]byte{joined(rule(req.seq, nlmFDumpIntr, table, chain, "web-1", 1), doneDatagram(req.seq, nlmFDumpIntr, 0))}
				}
				return [][]byte{joined(rule(req.seq, 0, table, chain, "web-1", 1), rule(req.seq, 0, table, chain, "web-2", 5), doneDatagram(req.seq, 0, 0))}
			},
			want: []string{"web-1:1", "web-2:5"}, requests: 2,
		},
		{
			name:     "a chain that does not exist has no rules",
			script:   always(func(seq uint32) [][]byte { return [][]byte{errorDatagram(seq, syscall.ENOENT)} }),
			requests: 1,
		},
		{
			name: "a dump that failed in the kernel is an error",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{joined(rule(seq, 0, table, chain, "web-1", 1), doneDatagram(seq, 0, syscall.ENOBUFS))}
			}),
			wantErr: syscall.ENOBUFS, requests: 1,
		},
		{
			name: "a message that is not a rule is an error",
			script: always(func(seq uint32) [][]byte {
				return [][]byte{nlMsg(nfnlSubsysNFTables<<8|nftMsgNewChain, 2, seq, []byte{2, 0, 0, 0})}
			}),
			wantErr: errNotARule, requests: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &replaySocket{script: tc.script}
			rules, err := findRules(s, "ip", table, chain, comments)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("findRules = %d rules, %v; want an error that is %v", len(rules), err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rules {
				if r.Table != table || r.Chain != chain || len(r.Expr) != 4 {
					t.Errorf("rule %+v: not of %s %s with its 4 bytes of expressions", r, table, chain)
				}
				got = append(got, fmt.Sprintf("%s:%d", r.Comment, r.Expr[0]))
			}
			if tc.wantErr == nil && !slices.Equal(got, tc.want) {
				t.Errorf("found %q, want %q (the expressions must be copies: the socket's buffer is spoilt after each read)", got, tc.want)
			}
			if len(s.sent) != tc.requests {
				t.Errorf("%d requests sent, want %d", len(s.sent), tc.requests)
			}
			for _, req := range s.sent {
				if a := attrsOf(t, req); req.flags != nlmFRequest|nlmFDump || len(a) != 2 || a[nftaRuleTable] != table || a[nftaRuleChain] != chain {
					t.Errorf("request flags %#x, attributes %q; want a dump of table %s, chain %s", req.flags, a, table, chain)
				}
			}
		})
	}
	t.Run("no chain is refused before anything is sent", func(t *testing.T) {
		s := &replaySocket{script: func(nlMessage, int) [][]byte { return nil }}
		if _, err := findRules(s, "ip", table, "", comments); !errors.Is(err, errNoChain) || len(s.sent) != 0 {
			t.Errorf("findRules of no chain = %v after %d requests; want errNoChain before any", err, len(s.sent))
		}
	})
}

// eachRule hands every rule of the table to its visitor as the dump
// comes, keeping none; a dump a change interrupted begins again (and
// says so), and a visitor's error ends it.
func TestEachRuleVisitsEveryRuleOfTheTableAsTheDumpComes(t *testing.T) {
	const table = "cni_hostport"
	rule := func(seq uint32, flags uint16, chain, comment string, expr byte) []byte {
		m := ruleDatagram(seq, flags, table, chain, comment)
		payload := append(m[nlmsgHeaderLen:len(m):len(m)], attr(nftaRuleExpressions, []byte{expr, expr, expr, expr})...)
		return nlMsg(nfnlSubsysNFTables<<8|nftMsgNewRule, 2|flags, seq, payload)
	}
	errVisit := errors.New("visitor refuses")
	for _, tc := range []struct {
		name     string
		script   func(req nlMessage, n int) [][]byte
		refuse   string   // the comment the visitor returns errVisit for
		want     []string // chain/comment:expression byte of each rule visited since the last begin
		begins   int
		wantErr  error
		requests int
	}{
		{
			name: "every rule of every chain of the table, in the kernel's order",
			script: func(req nlMessage, _ int) [][]byte {
				return [][]byte{
					joined(rule(req.seq, 0, "hostports", "web-1", 1), rule(req.seq, 0, "dnat", "web-1", 2)),
					joined(rule(req.seq, 0, "dnat", "web-2", 3), doneDatagram(req.seq, 0, 0)),
				}
			},
			want: []string{"hostports/web-1:1", "dnat/web-1:2", "dnat/web-2:3"}, begins: 1, requests: 1,
		},
		{
			name: "rules of another table, from a kernel that does not filter, are not visited",
			script: func(req nlMessage, _ int) [][]byte {
				other := ruleDatagram(req.seq, 0, "nat", "dnat", "web-9")
				return [][]byte{joined(other, rule(req.seq, 0, "dnat", "web-1", 1), doneDatagram(req.seq, 0, 0))}
			},
			want: []string{"dnat/web-1:1"}, begins: 1, requests: 1,
		},
		{
			name: "a dump a change interrupted begins again",
			script: func(req nlMessage, n int) [][]byte {
				if n == 0 {
					return [][]byte{joined(rule(req.seq, nlmFDumpIntr, "dnat", "web-1", 1), doneDatagram(req.seq, nlmFDumpIntr, 0))}
				}
				return [][]byte{joined(rule(req.seq, 0, "dnat", "web-1", 1), rule(req.seq, 0, "dnat", "web-2", 5), doneDatagram(req.seq, 0, 0))}
			},
			want: []string{"dnat/web-1:1", "dnat/web-2:5"}, begins: 2, requests: 2,
		},
		{
			name: "the visitor's error ends the dump",
			script: func(req nlMessage, _ int) [][]byte {
				return [][]byte{joined(rule(req.seq, 0, "dnat", "web-1", 1), rule(req.seq, 0, "dnat", "web-2", 2), rule(req.seq, 0, "dnat", "web-3", 3), doneDatagram(req.seq, 0, 0))}
			},
			refuse: "web-2", want: []string{"dnat/web-1:1"}, begins: 1, wantErr: errVisit, requests: 1,
		},
		{
			name:   "a table that does not exist has no rules",
			script: func(req nlMessage, _ int) [][]byte { return [][]byte{errorDatagram(req.seq, syscall.ENOENT)} },
			begins: 1, requests: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &replaySocket{script: tc.script}
			var got []string
			begins := 0
			err := eachRule(s, "ip", table, func() { begins, got = begins+1, nil }, func(r Rule) error {
				if r.Comment == tc.refuse {
					return errVisit
				}
				got = append(got, fmt.Sprintf("%s/%s:%d", r.Chain, r.Comment, r.Expr[0]))
				return nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("eachRule = %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) || begins != tc.begins {
				t.Errorf("visited %q after %d begins, want %q after %d", got, begins, tc.want, tc.begins)
			}
			if len(s.sent) != tc.requests {
				t.Errorf("%d requests sent, want %d", len(s.sent), tc.requests)
			}
		})
	}
}
