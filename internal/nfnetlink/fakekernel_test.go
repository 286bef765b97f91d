package nfnetlink

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"
	"syscall"
)

// fakeKernel answers nf_tables requests of one table the way the kernel
// does, in datagrams: GETGEN, rule dumps of a chain, and batches of
// DELRULE (by handle, or a whole chain) and DELCHAIN, applied as one
// transaction that every failed message aborts, each message acked. Its
// hooks let a test change the ruleset between questions.
type fakeKernel struct {
	table  string
	gen    uint32
	chains map[string][]fakeRule
	// afterDump runs after each rule dump is answered; beforeBatch before
	// each batch is applied (n counts batches from 0).
	afterDump   func(k *fakeKernel)
	beforeBatch func(k *fakeKernel, n int)
	// refuseBatch answers every batch as a whole with this errno;
	// refuseHandle answers the deletion of one handle with its errno.
	refuseBatch  syscall.Errno
	refuseHandle map[uint64]syscall.Errno
	// interruptDumps marks that many dumps as interrupted by a change.
	interruptDumps int

	batches [][]nlMessage // every batch received, begin to end
	dumps   int
	unread  [][]byte
	cut     bool // receive fails as a datagram cut to the buffer would
}

type fakeRule struct {
	handle  uint64
	comment string
	raw     []byte
}

func (k *fakeKernel) send(req []byte) error {
	msgs, err := parseNLMessages(req)
	if err != nil || len(msgs) == 0 {
		return errors.New("fake kernel: not netlink")
	}
	switch first := msgs[0]; {
	case first.typ == nfnlMsgBatchBegin:
		k.batch(msgs)
	case first.typ == nfnlSubsysNFTables<<8|nftMsgGetGen:
		gen := attr(nftaGenID, binary.BigEndian.AppendUint32(nil, k.gen))
		k.reply(nlMsg(nfnlSubsysNFTables<<8|nftMsgNewGen, 0, first.seq, append([]byte{0, 0, 0, 0}, gen...)), errorDatagram(first.seq, 0))
	case first.typ == nfnlSubsysNFTables<<8|nftMsgGetRule:
		k.dump(first)
	case first.typ == nfnlSubsysNFTables<<8|nftMsgGetChain:
		a := attrsOfMsg(first)
		if _, ok := k.chains[a[nftaChainName]]; a[nftaChainTable] != k.table || !ok {
			k.reply(errorDatagram(first.seq, syscall.ENOENT))
			return nil
		}
		k.reply(nlMsg(nfnlSubsysNFTables<<8|nftMsgNewChain, 0, first.seq, fakeChainPayload(k.table, a[nftaChainName], k.chainHandle(a[nftaChainName]))),
			errorDatagram(first.seq, 0))
	default:
		k.reply(errorDatagram(first.seq, syscall.EOPNOTSUPP))
	}
	return nil
}

func (k *fakeKernel) receive() ([]byte, error) {
	if k.cut {
		return nil, errCut
	}
	if len(k.unread) == 0 {
		return nil, errors.New("fake kernel: read past the end of the reply")
	}
	d := k.unread[0]
	k.unread = k.unread[1:]
	return d, nil
}

func (k *fakeKernel) reply(datagrams ...[]byte) { k.unread = append(k.unread, datagrams...) }

func (k *fakeKernel) dump(req nlMessage) {
	k.dumps++
	a := attrsOfMsg(req)
	flags := uint16(0)
	if k.interruptDumps > 0 {
		k.interruptDumps--
		flags = nlmFDumpIntr
	}
	chain, byChain := a[nftaRuleChain]
	_, ok := k.chains[chain]
	if a[nftaRuleTable] != k.table || byChain && !ok {
		k.reply(errorDatagram(req.seq, syscall.ENOENT))
		return
	}
	chains := []string{chain}
	if !byChain { // the whole table, chain by chain
		chains = slices.Sorted(maps.Keys(k.chains))
	}
	for _, c := range chains {
		for _, r := range k.chains[c] {
			k.reply(fakeRuleMsg(req.seq, flags, k.table, c, r))
		}
	}
	k.reply(doneDatagram(req.seq, flags, 0))
	if k.afterDump != nil {
		k.afterDump(k)
	}
}

func fakeRuleMsg(seq uint32, flags uint16, table, chain string, r fakeRule) []byte {
	return nlMsg(nfnlSubsysNFTables<<8|nftMsgNewRule, 2|flags, seq, fakeRulePayload(table, chain, r))
}

// fakeRulePayload is a rule of family ip as a NEWRULE or DELRULE message
// carries it.
func fakeRulePayload(table, chain string, r fakeRule) []byte {
	payload := append([]byte{2, 0, 0, 0}, attr(nftaRuleTable, strz(table))...)
	payload = append(payload, attr(nftaRuleChain, strz(chain))...)
	payload = append(payload, attr(nftaRuleHandle, binary.BigEndian.AppendUint64(nil, r.handle))...)
	payload = append(payload, attr(nftaRuleExpressions, r.raw)...)
	if r.comment != "" {
		payload = append(payload, attr(nftaRuleUserdata, append([]byte{nftUdataRuleComment, byte(len(r.comment) + 1)}, strz(r.comment)...))...)
	}
	return payload
}

// batch applies one batch as a transaction on a copy of the chains.
func (k *fakeKernel) batch(msgs []nlMessage) {
	k.batches = append(k.batches, msgs)
	begin := msgs[0]
	if k.beforeBatch != nil {
		k.beforeBatch(k, len(k.batches)-1)
	}
	if k.refuseBatch != 0 {
		k.reply(errorDatagram(begin.seq, k.refuseBatch))
		return
	}
	var gen uint32
	_ = eachAttr(begin.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
		if typ == nfnlBatchGenID && len(data) == 4 {
			gen = binary.BigEndian.Uint32(data)
		}
	})
	if gen != 0 && gen != k.gen {
		k.reply(errorDatagram(begin.seq, errnoRestart))
		return
	}
	work := map[string][]fakeRule{}
	for ch, rules := range k.chains {
		work[ch] = slices.Clone(rules)
	}
	var acks [][]byte
	failed := false
	for _, m := range msgs[1 : len(msgs)-1] {
		errno := k.apply(work, m)
		failed = failed || errno != 0
		acks = append(acks, errorDatagram(m.seq, errno))
	}
	if !failed {
		k.chains = work
		k.gen++
	}
	k.reply(acks...)
}

func (k *fakeKernel) apply(work map[string][]fakeRule, m nlMessage) syscall.Errno {
	a := attrsOfMsg(m)
	switch m.typ {
	case nfnlSubsysNFTables<<8 | nftMsgDelRule:
		rules, ok := work[a[nftaRuleChain]]
		if !ok || a[nftaRuleTable] != k.table {
			return syscall.ENOENT
		}
		h, byHandle := handleOf(m)
		if !byHandle {
			work[a[nftaRuleChain]] = nil
			return 0
		}
		if errno := k.refuseHandle[h]; errno != 0 {
			return errno
		}
		i := slices.IndexFunc(rules, func(r fakeRule) bool { return r.handle == h })
		if i < 0 {
			return syscall.ENOENT
		}
		work[a[nftaRuleChain]] = slices.Delete(rules, i, i+1)
	case nfnlSubsysNFTables<<8 | nftMsgDelChain:
		name := a[nftaChainName]
		if _, ok := work[name]; !ok {
			return syscall.ENOENT
		}
		for _, rules := range work {
			for _, r := range rules {
				if strings.Contains(string(r.raw), "jump "+name+";") {
					return syscall.EBUSY
				}
			}
		}
		delete(work, name)
	default:
		return syscall.EOPNOTSUPP
	}
	return 0
}

func handleOf(m nlMessage) (uint64, bool) {
	var h uint64
	found := false
	_ = eachAttr(m.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
		if typ == nftaRuleHandle && len(data) == 8 {
			h, found = binary.BigEndian.Uint64(data), true
		}
	})
	return h, found
}

func attrsOfMsg(m nlMessage) map[uint16]string {
	a := map[uint16]string{}
	_ = eachAttr(m.payload[nfgenmsgLen:], func(typ uint16, data []byte) { a[typ] = cString(data) })
	return a
}

// handlesLeft returns the handles left in chain.
func (k *fakeKernel) handlesLeft(chain string) []uint64 {
	var hs []uint64
	for _, r := range k.chains[chain] {
		hs = append(hs, r.handle)
	}
	return hs
}

// chainHandle is chain's handle: 1000 and up, by name.
func (k *fakeKernel) chainHandle(chain string) uint64 {
	return 1000 + uint64(slices.Index(slices.Sorted(maps.Keys(k.chains)), chain))
}

// fakeChainPayload is a chain of family ip as a NEWCHAIN or DELCHAIN
// message carries it.
func fakeChainPayload(table, chain string, handle uint64) []byte {
	return cat([]byte{2, 0, 0, 0}, attr(nftaChainTable, strz(table)), attr(nftaChainHandle, binary.BigEndian.AppendUint64(nil, handle)),
		attr(nftaChainName, strz(chain)))
}
