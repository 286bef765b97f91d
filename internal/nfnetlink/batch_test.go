package nfnetlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"

	"github.com/seed1280861d/cninet/host"
)

// rawOf is a rule's expressions for the fake kernel: the address bytes,
// and the chain it jumps to.
func rawOf(addr, jump string) []byte {
	raw := append([]byte("saddr "), netip.MustParseAddr(addr).AsSlice()...)
	return append(raw, fmt.Sprintf(" jump %s;", jump)...)
}

func masqRuleset() map[string][]fakeRule {
	return map[string][]fakeRule{
		"POSTROUTING": {
			{10, "a", rawOf("198.18.0.5", "CNI-a")},
			{11, "b", rawOf("198.18.0.6", "CNI-b")},
			{12, "c", rawOf("198.18.0.7", "CNI-c")},
		},
		"CNI-a": {{20, "a", []byte("masquerade")}},
		"CNI-b": {{21, "b", []byte("masquerade")}},
	}
}

func at(pos int, comment, addr, jump string) Target {
	return Target{Chain: "POSTROUTING", Pos: pos, Comment: comment,
		Needles: [][]byte{netip.MustParseAddr(addr).AsSlice(), []byte(jump)}}
}

func TestDeleteRulesDeletesByHandleOnlyWhatIsExactlyAsPlanned(t *testing.T) {
	planned := []Target{at(0, "a", "198.18.0.5", "CNI-a"), at(2, "c", "198.18.0.7", "CNI-c")}
	for _, tc := range []struct {
		name    string
		targets []Target
		setup   func(k *fakeKernel)
		want    []host.HandleOutcome
		wantErr error
		left    []uint64 // handles left in POSTROUTING
		batches int
	}{
		{
			name: "rules found where and as planned are deleted by handle in one batch",
			want: []host.HandleOutcome{host.Deleted, host.Deleted}, left: []uint64{11}, batches: 1,
		},
		{
			name: "a rule that vanished between dump and delete is AlreadyGone, and only the others go",
			setup: func(k *fakeKernel) {
				k.beforeBatch = func(k *fakeKernel, n int) { // a kernel that does not check the generation
					if n == 0 {
						k.chains["POSTROUTING"] = slices.Delete(k.chains["POSTROUTING"], 2, 3)
					}
				}
			},
			want: []host.HandleOutcome{host.Deleted, host.AlreadyGone}, left: []uint64{11}, batches: 2,
		},
		{
			name: "a rule whose handle changed is not deleted, nor the rule now holding its place",
			targets: []Target{{Chain: "POSTROUTING", Pos: -1, Handle: 12, Comment: "c",
				Needles: [][]byte{netip.MustParseAddr("198.18.0.7").AsSlice()}}},
			setup: func(k *fakeKernel) {
				k.chains["POSTROUTING"][2].handle = 13 // deleted and added back
			},
			want: []host.HandleOutcome{host.NotDeleted}, left: []uint64{10, 11, 13}, batches: 0,
		},
		{
			name: "rules that moved in their chain are left for deletion by content",
			setup: func(k *fakeKernel) {
				k.chains["POSTROUTING"] = append([]fakeRule{{9, "x", rawOf("198.18.0.9", "CNI-x")}}, k.chains["POSTROUTING"]...)
			},
			want: []host.HandleOutcome{host.NotDeleted, host.NotDeleted}, left: []uint64{9, 10, 11, 12}, batches: 0,
		},
		{
			name: "a rule of the same comment and address that slid into a planned rule's place is not taken for it",
			// The firewall plugin's two rules of an address carry no
			// comment and the same address: listed as three rules, the
			// chain lost its first before the dump, and the second rule
			// now holds the first's place.
			targets: []Target{{Chain: "POSTROUTING", Pos: 1, ChainLen: 3, Needles: [][]byte{netip.MustParseAddr("198.18.0.5").AsSlice()}}},
			setup: func(k *fakeKernel) {
				k.chains["POSTROUTING"] = []fakeRule{{31, "", rawOf("198.18.0.5", "d")}, {32, "", rawOf("198.18.0.5", "s")}}
			},
			want: []host.HandleOutcome{host.NotDeleted}, left: []uint64{31, 32}, batches: 0,
		},
		{
			name:    "a rule at its place in a chain of the length listed is deleted by handle",
			targets: []Target{{Chain: "POSTROUTING", Pos: 1, ChainLen: 2, Needles: [][]byte{netip.MustParseAddr("198.18.0.5").AsSlice()}}},
			setup: func(k *fakeKernel) {
				k.chains["POSTROUTING"] = []fakeRule{{31, "", rawOf("198.18.0.5", "d")}, {32, "", rawOf("198.18.0.5", "s")}}
			},
			want: []host.HandleOutcome{host.Deleted}, left: []uint64{31}, batches: 1,
		},
		{
			name:    "a rule whose comment differs is not the planned one",
			targets: []Target{at(0, "ab", "198.18.0.5", "CNI-a")},
			want:    []host.HandleOutcome{host.NotDeleted}, left: []uint64{10, 11, 12}, batches: 0,
		},
		{
			name:    "a rule that lacks a planned address is not the planned one",
			targets: []Target{at(0, "a", "198.18.0.99", "CNI-a")},
			want:    []host.HandleOutcome{host.NotDeleted}, left: []uint64{10, 11, 12}, batches: 0,
		},
		{
			name: "a ruleset changed after the dump refuses the batch; the rules are dumped and matched again",
			setup: func(k *fakeKernel) {
				k.beforeBatch = func(k *fakeKernel, n int) {
					if n == 0 {
						k.gen++ // a change elsewhere
					}
				}
			},
			want: []host.HandleOutcome{host.Deleted, host.Deleted}, left: []uint64{11}, batches: 2,
		},
		{
			name: "a ruleset changed during the dump is dumped again before any batch",
			setup: func(k *fakeKernel) {
				k.afterDump = func(k *fakeKernel) {
					if k.dumps == 1 {
						k.gen++
					}
				}
			},
			want: []host.HandleOutcome{host.Deleted, host.Deleted}, left: []uint64{11}, batches: 1,
		},
		{
			name: "a change that moved the planned rules is seen on the new dump",
			setup: func(k *fakeKernel) {
				k.afterDump = func(k *fakeKernel) {
					if k.dumps == 1 {
						k.chains["POSTROUTING"] = slices.Delete(k.chains["POSTROUTING"], 0, 1)
						k.gen++
					}
				}
			},
			want: []host.HandleOutcome{host.NotDeleted, host.NotDeleted}, left: []uint64{11, 12}, batches: 0,
		},
		{
			name:  "a ruleset that changes at every attempt is an error, and nothing is deleted",
			setup: func(k *fakeKernel) { k.beforeBatch = func(k *fakeKernel, _ int) { k.gen++ } },
			want:  []host.HandleOutcome{host.NotDeleted, host.NotDeleted}, wantErr: ErrGenerationChanged,
			left: []uint64{10, 11, 12}, batches: batchAttempts,
		},
		{
			name:  "a dump a change interrupted is taken again",
			setup: func(k *fakeKernel) { k.interruptDumps = 1 },
			want:  []host.HandleOutcome{host.Deleted, host.Deleted}, left: []uint64{11}, batches: 1,
		},
		{
			name:  "EPERM for the whole batch is an error, and nothing is deleted",
			setup: func(k *fakeKernel) { k.refuseBatch = syscall.EPERM },
			want:  []host.HandleOutcome{host.NotDeleted, host.NotDeleted}, wantErr: syscall.EPERM,
			left: []uint64{10, 11, 12}, batches: 1,
		},
		{
			name:  "any other answer to one deletion is an error, and the batch is not applied",
			setup: func(k *fakeKernel) { k.refuseHandle = map[uint64]syscall.Errno{12: syscall.ENOMEM} },
			want:  []host.HandleOutcome{host.NotDeleted, host.NotDeleted}, wantErr: syscall.ENOMEM,
			left: []uint64{10, 11, 12}, batches: 1,
		},
		{
			name:  "a cut datagram is an error",
			setup: func(k *fakeKernel) { k.cut = true },
			want:  []host.HandleOutcome{host.NotDeleted, host.NotDeleted}, wantErr: errCut,
			left: []uint64{10, 11, 12}, batches: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &fakeKernel{table: "nat", gen: 7, chains: masqRuleset()}
			if tc.setup != nil {
				tc.setup(k)
			}
			targets := tc.targets
			if targets == nil {
				targets = planned
			}
			got, err := deleteRules(k, "ip", "nat", targets)
			if (tc.wantErr == nil) != (err == nil) || !errors.Is(err, tc.wantErr) {
				t.Fatalf("deleteRules error = %v; want %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("outcomes = %v; want %v", got, tc.want)
			}
			if left := k.handlesLeft("POSTROUTING"); !slices.Equal(left, tc.left) {
				t.Errorf("handles left = %v; want %v", left, tc.left)
			}
			if len(k.batches) != tc.batches {
				t.Errorf("%d batches sent; want %d", len(k.batches), tc.batches)
			}
		})
	}
}

func TestDeleteChainsFlushesAndDeletesByNameAndSaysWhatBecameOfEach(t *testing.T) {
	k := &fakeKernel{table: "nat", gen: 7, chains: masqRuleset()}
	got, err := deleteChains(k, "ip", "nat", []string{"CNI-a", "CNI-b", "CNI-gone"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []host.HandleOutcome{host.NotDeleted, host.NotDeleted, host.AlreadyGone}; !slices.Equal(got, want) {
		t.Errorf("outcomes = %v; want %v (a chain still jumped to is refused with EBUSY, a missing one is gone)", got, want)
	}
	k.chains["POSTROUTING"] = nil // the jumps gone, the chains can go
	got, err = deleteChains(k, "ip", "nat", []string{"CNI-a", "CNI-b"})
	if err != nil || !slices.Equal(got, []host.HandleOutcome{host.Deleted, host.Deleted}) {
		t.Fatalf("deleteChains = %v, %v; want both deleted", got, err)
	}
	if _, ok := k.chains["CNI-a"]; ok {
		t.Error("CNI-a is still there")
	}
	last := k.batches[len(k.batches)-1]
	var kinds []uint16
	for _, m := range last[1 : len(last)-1] {
		kinds = append(kinds, m.typ&0xff)
		if _, byHandle := handleOf(m); byHandle {
			t.Errorf("a chain's flush names a handle")
		}
	}
	if want := []uint16{nftMsgDelRule, nftMsgDelChain, nftMsgDelRule, nftMsgDelChain}; !slices.Equal(kinds, want) {
		t.Errorf("batch = %v; want flush then delete for each chain %v", kinds, want)
	}
}

func TestDeletionsGoInBatchesEachAtTheGenerationItsPredecessorLeft(t *testing.T) {
	const n = 2*batchChunk + 88
	k := &fakeKernel{table: "nat", gen: 41, chains: map[string][]fakeRule{}}
	var targets []Target
	for i := range n {
		k.chains["POSTROUTING"] = append(k.chains["POSTROUTING"], fakeRule{uint64(100 + i), "x", rawOf("198.18.0.5", "ACCEPT")})
		targets = append(targets, Target{Chain: "POSTROUTING", Pos: i, Comment: "x"})
	}
	got, err := deleteRules(k, "ip", "nat", targets)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(got, func(o host.HandleOutcome) bool { return o != host.Deleted }) || len(k.chains["POSTROUTING"]) != 0 {
		t.Fatalf("%d rules left; outcomes %v", len(k.chains["POSTROUTING"]), got)
	}
	var sizes []int
	var gens []uint32
	for _, b := range k.batches {
		sizes = append(sizes, len(b)-2)
		_ = eachAttr(b[0].payload[nfgenmsgLen:], func(typ uint16, data []byte) { gens = append(gens, binary.BigEndian.Uint32(data)) })
	}
	if !slices.Equal(sizes, []int{batchChunk, batchChunk, 88}) || !slices.Equal(gens, []uint32{41, 42, 43}) {
		t.Errorf("batches of %v at generations %v; want %v at 41, 42, 43", sizes, gens, []int{batchChunk, batchChunk, 88})
	}
}

func TestABatchIsFramedForNFTablesAndAsksForEveryAck(t *testing.T) {
	msgs := []batchMsg{{item: 0, typ: nftMsgDelRule, attrs: []nlAttr{{nftaRuleTable, strz("nat")}}}, {item: 1, typ: nftMsgDelChain}}
	b, seq := encodeBatch(nfproto["ip6"], 0x01020304, msgs)
	parsed, err := parseNLMessages(b)
	if err != nil || len(parsed) != 4 {
		t.Fatalf("parse = %d messages, %v", len(parsed), err)
	}
	begin, end := parsed[0], parsed[3]
	if begin.typ != nfnlMsgBatchBegin || end.typ != nfnlMsgBatchEnd || begin.seq != seq || end.seq != seq+3 {
		t.Errorf("frame = %#x seq %d .. %#x seq %d; want BATCH_BEGIN seq %d .. BATCH_END seq %d", begin.typ, begin.seq, end.typ, end.seq, seq, seq+3)
	}
	for _, m := range []nlMessage{begin, end} {
		if m.payload[0] != afUnspec || binary.BigEndian.Uint16(m.payload[2:]) != nfnlSubsysNFTables {
			t.Errorf("batch control nfgenmsg = %v; want AF_UNSPEC, res_id NFNL_SUBSYS_NFTABLES (big endian)", m.payload[:4])
		}
	}
	var gen []byte
	_ = eachAttr(begin.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
		if typ == nfnlBatchGenID {
			gen = data
		}
	})
	if !slices.Equal(gen, []byte{1, 2, 3, 4}) {
		t.Errorf("NFNL_BATCH_GENID = %v; want the generation, big endian", gen)
	}
	for i, m := range parsed[1:3] {
		if m.flags != nlmFRequest|nlmFAck || m.seq != seq+1+uint32(i) || m.payload[0] != nfproto["ip6"] {
			t.Errorf("deletion %d: flags %#x seq %d family %d; want an acked request numbered %d of ip6", i, m.flags, m.seq, m.payload[0], seq+1+uint32(i))
		}
	}
	if b, _ := encodeBatch(2, 0, msgs); slices.ContainsFunc(mustParseNL(t, b)[:1], func(m nlMessage) bool { return len(m.payload) > nfgenmsgLen }) {
		t.Error("a batch at no particular generation names one")
	}
}

func mustParseNL(t *testing.T, b []byte) []nlMessage {
	t.Helper()
	msgs, err := parseNLMessages(b)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestListTablesNamesTheTablesOfKnownFamilies(t *testing.T) {
	table := func(seq uint32, family byte, name string) []byte {
		return nlMsg(nfnlSubsysNFTables<<8|nftMsgNewTable, 2, seq, append([]byte{family, 0, 0, 0}, attr(nftaTableName, strz(name))...))
	}
	s := &replaySocket{script: func(req nlMessage, _ int) [][]byte {
		return [][]byte{joined(table(req.seq, 2, "nat"), table(req.seq, 10, "cni_hostport")),
			joined(table(req.seq, 1, "cni_plugins_masquerade"), table(req.seq, 7, "bridged"), doneDatagram(req.seq, 0, 0))}
	}}
	got, err := listTables(s)
	want := map[host.NFTable]bool{{Family: "ip", Name: "nat"}: true, {Family: "ip6", Name: "cni_hostport"}: true, {Family: "inet", Name: "cni_plugins_masquerade"}: true}
	if err != nil || len(got) != len(want) {
		t.Fatalf("listTables = %v, %v; want %v", got, err, want)
	}
	for tb := range want {
		if !got[tb] {
			t.Errorf("%s missing from %v", tb, got)
		}
	}
	if req := s.sent[0]; req.typ != nfnlSubsysNFTables<<8|nftMsgGetTable || req.flags != nlmFRequest|nlmFDump {
		t.Errorf("request = type %#x flags %#x; want a GETTABLE dump", req.typ, req.flags)
	}
}
