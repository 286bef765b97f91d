package nfnetlink

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
)

// nlMsg encodes one netlink message as the kernel sends it.
func nlMsg(typ, flags uint16, seq uint32, payload []byte) []byte {
	b := make([]byte, nlmsgHeaderLen, nlmsgHeaderLen+len(payload)+3)
	binary.NativeEndian.PutUint32(b[0:], uint32(nlmsgHeaderLen+len(payload)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	b = append(b, payload...)
	return append(b, make([]byte, align4(len(b))-len(b))...)
}

func attr(typ uint16, data []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(nlaHeaderLen+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	return append(b, make([]byte, align4(len(b))-len(b))...)
}

func TestNFTRequestIsOneWellFormedNFTablesMessage(t *testing.T) {
	req := nftRequest(nftMsgGetChain, nlmFAck, 7, nfproto["ip6"],
		nlAttr{nftaChainTable, strz("nat")}, nlAttr{nftaChainName, strz("CNI-abc")})
	msgs, err := parseNLMessages(req)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("parse = %v, %v", msgs, err)
	}
	m := msgs[0]
	if m.typ != 10<<8|4 || m.flags != nlmFRequest|nlmFAck || m.seq != 7 {
		t.Errorf("header = type %#x flags %#x seq %d", m.typ, m.flags, m.seq)
	}
	if m.payload[0] != 10 || m.payload[1] != 0 {
		t.Errorf("nfgenmsg = %v, want family 10 (ipv6), version 0", m.payload[:4])
	}
	var attrs []nlAttr
	err = eachAttr(m.payload[nfgenmsgLen:], func(typ uint16, data []byte) { attrs = append(attrs, nlAttr{typ, data}) })
	if err != nil || len(attrs) != 2 || cString(attrs[0].data) != "nat" || cString(attrs[1].data) != "CNI-abc" || attrs[1].typ != nftaChainName {
		t.Errorf("attributes = %+v, %v", attrs, err)
	}
	if len(req)%4 != 0 {
		t.Errorf("length %d is not aligned", len(req))
	}
}

func TestParseNLRuleReadsWhereTheRuleIsItsHandleCommentAndExpressions(t *testing.T) {
	expr := attr(1|0x8000, attr(1, strz("cmp"))) // nested, as the kernel flags it
	udata := []byte{5, 2, 'x', 'y', nftUdataRuleComment, 8}
	udata = append(udata, strz("web-1-x")...)
	payload := append([]byte{1, 0, 0, 5}, attr(nftaRuleTable, strz("cni_plugins_masquerade"))...)
	payload = append(payload, attr(nftaRuleChain, strz("masq_checks"))...)
	payload = append(payload, attr(nftaRuleHandle|0x4000, binary.BigEndian.AppendUint64(nil, 42))...)
	payload = append(payload, attr(nftaRuleExpressions|0x8000, expr)...)
	payload = append(payload, attr(nftaRuleUserdata, udata)...)
	msgs, err := parseNLMessages(append(nlMsg(10<<8|nftMsgNewRule, 2, 9, payload), nlMsg(nlmsgDone, 2, 9, []byte{0, 0, 0, 0})...))
	if err != nil || len(msgs) != 2 {
		t.Fatalf("parse = %v, %v", msgs, err)
	}
	r, err := parseNLRule("inet", msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Table != "cni_plugins_masquerade" || r.Chain != "masq_checks" || r.Handle != 42 || r.Comment != "web-1-x" || string(r.Expr) != string(expr) {
		t.Errorf("rule = %+v", r)
	}
	if _, err := parseNLRule("inet", msgs[1]); err == nil {
		t.Error("NLMSG_DONE read as a rule")
	}
}

func TestARuleOfADumpCountsOnlyInTheTableAndChainAsked(t *testing.T) {
	for _, tc := range []struct {
		table, chain string
		want         bool
	}{
		{"filter", "CNI-FORWARD", true},
		{"filter", "", true},
		{"filter", "FORWARD", false},
		{"nat", "CNI-FORWARD", false},
		{"nat", "", false},
	} {
		if got := (Rule{Table: "filter", Chain: "CNI-FORWARD"}).in(tc.table, tc.chain); got != tc.want {
			t.Errorf("in(%q, %q) = %v, want %v", tc.table, tc.chain, got, tc.want)
		}
	}
}

func TestNetlinkErrorsAndMalformedMessages(t *testing.T) {
	enoent := nlMessage{typ: nlmsgError, payload: binary.NativeEndian.AppendUint32(nil, uint32(0xffffffff-uint32(syscall.ENOENT)+1))}
	if err := errnoOf(enoent); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("errnoOf(-ENOENT) = %v", err)
	}
	if err := errnoOf(nlMessage{typ: nlmsgError, payload: make([]byte, 20)}); err != nil {
		t.Errorf("an ack read as %v", err)
	}
	tooLong := nlMsg(nlmsgDone, 0, 1, nil)
	binary.NativeEndian.PutUint32(tooLong, 64)
	tooShort := nlMsg(nlmsgDone, 0, 1, nil)
	binary.NativeEndian.PutUint32(tooShort, 4)
	for name, b := range map[string][]byte{"longer than the datagram": tooLong, "shorter than its header": tooShort} {
		if _, err := parseNLMessages(b); err == nil {
			t.Errorf("a message %s parsed", name)
		}
	}
	if err := eachAttr([]byte{200, 0, 1, 0}, func(uint16, []byte) {}); err == nil {
		t.Error("an attribute longer than its message parsed")
	}
	if c := udataComment([]byte{0, 40, 'a'}); c != "" {
		t.Errorf("a cut user data record read as comment %q", c)
	}
}

func TestAnAddressIsMentionedOnlyByteForByte(t *testing.T) {
	r := Rule{Expr: []byte{0, 1, 198, 18, 0, 5, 9}}
	if !r.Mentions([][]byte{{198, 18, 0, 5}}) {
		t.Error("198.18.0.5 not found")
	}
	if r.Mentions([][]byte{{198, 18, 0, 6}, nil}) {
		t.Error("198.18.0.6 found")
	}
}

func TestADumpThatFailedInTheKernelIsNoCompleteDump(t *testing.T) {
	failed := nlMessage{typ: nlmsgDone, payload: binary.NativeEndian.AppendUint32(nil, uint32(0xffffffff-uint32(syscall.ENOBUFS)+1))}
	if err := doneErr(failed); !errors.Is(err, syscall.ENOBUFS) {
		t.Errorf("doneErr(-ENOBUFS) = %v", err)
	}
	for _, ok := range []nlMessage{{typ: nlmsgDone, payload: make([]byte, 4)}, {typ: nlmsgDone}} {
		if err := doneErr(ok); err != nil {
			t.Errorf("doneErr(%v) = %v, want nil", ok.payload, err)
		}
	}
}
