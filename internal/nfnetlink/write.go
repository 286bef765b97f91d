package nfnetlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/seed1280861d/cninet/host"
)

// The wire side of nf_tables batches (see batch.go), and the
// table listing that replaces `nft list tables`, which reads the whole
// ruleset to print a few names.

// errnoRestart is Linux's ERESTART, nf_tables' answer to a batch whose
// generation is no longer the ruleset's (syscall names it on Linux only).
const errnoRestart = syscall.Errno(85)

// encodeBatch encodes msgs as one batch of family proto at generation gen
// (0: any), every deletion asking for its ack. Its messages are numbered
// from the returned seq: the begin message seq, msgs[i] seq+1+i, the end
// seq+1+len(msgs).
func encodeBatch(proto uint8, gen uint32, msgs []batchMsg) (b []byte, seq uint32) {
	seq = nlSeq.Add(uint32(len(msgs)+2)) - uint32(len(msgs)+2) + 1
	var genAttr []nlAttr
	if gen != 0 {
		genAttr = []nlAttr{{nfnlBatchGenID, binary.BigEndian.AppendUint32(nil, gen)}}
	}
	b = append(make([]byte, 0, 64*(len(msgs)+2)), batchControl(nfnlMsgBatchBegin, seq, genAttr...)...)
	for i, m := range msgs {
		b = appendNFTRequest(b, m.typ, nlmFAck, seq+1+uint32(i), proto, m.attrs...)
	}
	return append(b, batchControl(nfnlMsgBatchEnd, seq+1+uint32(len(msgs)))...), seq
}

// batchControl encodes a batch's begin or end message: not of nf_tables
// itself but of nfnetlink, naming nf_tables in its resource id.
func batchControl(typ uint16, seq uint32, attrs ...nlAttr) []byte {
	b := nftRequest(0, 0, seq, afUnspec, attrs...)
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.BigEndian.PutUint16(b[nlmsgHeaderLen+2:], nfnlSubsysNFTables)
	return b
}

// sendBatch sends msgs as one batch and returns the kernel's answer to
// each (nil: acked). An answer to the batch as a whole ends it: ERESTART
// (the generation moved) is errGenerationChanged, anything else is
// returned as it is; nothing of such a batch was applied.
func sendBatch(s nlSocket, proto uint8, gen uint32, msgs []batchMsg) ([]error, error) {
	req, seq := encodeBatch(proto, gen, msgs)
	if err := s.send(req); err != nil {
		return nil, err
	}
	errs := make([]error, len(msgs))
	answered := make([]bool, len(msgs))
	for left := len(msgs); left > 0; {
		datagram, err := s.receive()
		if err != nil {
			return nil, err
		}
		replies, err := parseNLMessages(datagram)
		if err != nil {
			return nil, err
		}
		for _, m := range replies {
			if m.typ != nlmsgError {
				continue
			}
			if m.seq == seq { // the batch itself was refused
				switch err := errnoOf(m); {
				case errors.Is(err, errnoRestart):
					return nil, ErrGenerationChanged
				case err != nil:
					return nil, err
				}
				continue
			}
			i := int(m.seq - seq - 1)
			if m.seq <= seq || i >= len(msgs) || answered[i] {
				continue // a late answer to an earlier question
			}
			answered[i], errs[i] = true, errnoOf(m)
			left--
		}
	}
	return errs, nil
}

// nfFamilyName is nfproto backwards.
var nfFamilyName = map[uint8]string{1: "inet", 2: "ip", 10: "ip6"}

// listTables returns the nf_tables tables of the families cninet knows,
// from one dump of the table list: the kernel lists names without rules.
func listTables(s nlSocket) (map[host.NFTable]bool, error) {
	for attempt := 1; ; attempt++ {
		tables := map[host.NFTable]bool{}
		var parseErr error
		seq := nlSeq.Add(1)
		err := exchange(s, nftRequest(nftMsgGetTable, nlmFDump, seq, afUnspec), seq, func(m nlMessage) bool {
			if m.typ != nfnlSubsysNFTables<<8|nftMsgNewTable || len(m.payload) < nfgenmsgLen {
				parseErr = fmt.Errorf("netlink: message type %#x in a table dump", m.typ)
				return false
			}
			family, ok := nfFamilyName[m.payload[0]]
			parseErr = eachAttr(m.payload[nfgenmsgLen:], func(typ uint16, data []byte) {
				if typ == nftaTableName && ok {
					tables[host.NFTable{Family: family, Name: cString(data)}] = true
				}
			})
			return parseErr == nil
		})
		switch {
		case parseErr != nil:
			return nil, parseErr
		case errors.Is(err, errDumpInterrupted) && attempt < dumpAttempts:
			continue
		case err != nil:
			return nil, fmt.Errorf("netlink: listing nf_tables tables: %w", err)
		}
		return tables, nil
	}
}
