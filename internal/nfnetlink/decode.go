package nfnetlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// What cleanup reads of a rule's expressions is the addresses nft would
// list for it: the one address of an `ip[6] saddr == A` or `ip[6] daddr
// == A` match, and of a `dnat to A`. nft reads them back from the same
// expressions this file reads: a payload load of the network header into
// a register, compared for equality with a constant; an immediate
// address loaded into the register a nat expression of type DNAT takes
// its address from. Anything else (a negation, a prefix, a set, a range,
// a map) is no single address, as it is none in nft's listing.
//
// A drift check reads three things more, the same way: the port of a
// `tcp dport == P` match (a load of the transport header's bytes 2 and 3,
// compared for equality; `udp`, `sctp`, `dccp` and `udplite` alike, and
// `th dport` where no protocol match precedes it), the port a `dnat to
// A:P` translates to (an immediate in the register the nat expression
// takes its lowest port from, and no range), and the verdict a rule ends
// in (an immediate to the verdict register: accept, drop, jump, goto,
// return, with the chain a jump or goto names).

// nf_tables expression attributes (linux/netfilter/nf_tables.h).
const (
	nftaListElem = 1
	nftaExprName = 1
	nftaExprData = 2
	nftaDataVal  = 1
	nftaDataVerd = 2

	nftaVerdictCode  = 1
	nftaVerdictChain = 2

	nftaPayloadDreg    = 1
	nftaPayloadBase    = 2
	nftaPayloadOffset  = 3
	nftaPayloadLen     = 4
	nftaCmpSreg        = 1
	nftaCmpOp          = 2
	nftaCmpData        = 3
	nftaImmDreg        = 1
	nftaImmData        = 2
	nftaMetaDreg       = 1
	nftaMetaKey        = 2
	nftaNatType        = 1
	nftaNatRegAddrMin  = 3
	nftaNatRegAddrMax  = 4
	nftaNatRegProtoMin = 5
	nftaNatRegProtoMax = 6

	nftPayloadNetworkHeader   = 1
	nftPayloadTransportHeader = 2
	nftCmpEq                  = 0
	nftNatDNAT                = 1
	nftMetaNFProto            = 15
	nftMetaL4Proto            = 16
	nfprotoIPv4               = 2
	nfprotoIPv6               = 10
	nftRegVerdict             = 0

	// Verdict codes (linux/netfilter.h, nf_tables.h), as signed 32 bits.
	nfDrop    = 0
	nfAccept  = 1
	nftJump   = -3
	nftGoto   = -4
	nftReturn = -5
)

// dportProtocols are the transport protocols whose header has the
// destination port at bytes 2 and 3, by IP protocol number: nft lists a
// match of those bytes as `<protocol> dport` after a match of one of
// them (for another protocol they are something else: ICMP's checksum),
// and as `th dport` when no protocol match precedes it.
var dportProtocols = map[uint8]bool{6: true, 17: true, 33: true, 132: true, 136: true} // tcp, udp, dccp, sctp, udplite

// Addrs is what a rule says of addresses, as nft lists them: each is
// invalid when the rule has none, or none that is one address.
type Addrs struct {
	Saddr, Daddr, DNAT netip.Addr
}

// Decoded is what a rule says as nft lists it: its addresses, its
// destination port and the port a DNAT translates to (0 where there is
// none, or none that is one port), and the verdict it ends in ("accept",
// "drop", "jump", "goto", "return"; "" for none) with the chain a jump or
// goto names.
type Decoded struct {
	Addrs
	DPort, DNATPort uint16
	// L4Proto names the transport protocol DPort is of ("tcp", "udp",
	// "sctp", "dccp", "udplite"), as nft lists `<protocol> dport`; ""
	// for `th dport` or no port.
	L4Proto         string
	Verdict, Target string
}

// l4Names name the transport protocols of dportProtocols as nft does.
var l4Names = map[uint8]string{6: "tcp", 17: "udp", 33: "dccp", 132: "sctp", 136: "udplite"}

// register is what the decoding knows a register holds.
type register struct {
	// kind is 0: unknown; 'p': a network-header payload; 't': a
	// transport-header payload; 'i': an immediate; 'm': the nfproto meta;
	// 'l': the l4proto meta.
	kind           byte
	offset, length uint32
	value          []byte
}

// Addrs decodes the addresses of r's expressions (see the file's head).
// A rule of an inet table matches an address only after a `meta nfproto`
// match names its protocol, as nft requires; ip and ip6 tables have one.
func (r Rule) Addrs() (Addrs, error) {
	d, err := r.Decode()
	return d.Addrs, err
}

// Decode decodes r's expressions into what nft's listing says of them
// (see the file's head): Addrs, and the ports and verdict a drift check
// reads.
func (r Rule) Decode() (Decoded, error) {
	var out Decoded
	proto := map[string]uint8{"ip": nfprotoIPv4, "ip6": nfprotoIPv6}[r.Family]
	l4 := -1 // the transport protocol a match named; -1: none yet
	regs := map[uint32]register{}
	var inner []error
	err := eachAttr(r.Expr, func(typ uint16, elem []byte) {
		if typ != nftaListElem {
			return
		}
		var name string
		var data []byte
		inner = append(inner, eachAttr(elem, func(typ uint16, b []byte) {
			switch typ {
			case nftaExprName:
				name = cString(b)
			case nftaExprData:
				data = b
			}
		}))
		attrs := map[uint16][]byte{}
		inner = append(inner, eachAttr(data, func(typ uint16, b []byte) { attrs[typ] = b }))
		switch name {
		case "payload":
			reg := register{}
			switch be32(attrs[nftaPayloadBase]) {
			case nftPayloadNetworkHeader:
				reg = register{kind: 'p', offset: be32(attrs[nftaPayloadOffset]), length: be32(attrs[nftaPayloadLen])}
			case nftPayloadTransportHeader:
				reg = register{kind: 't', offset: be32(attrs[nftaPayloadOffset]), length: be32(attrs[nftaPayloadLen])}
			}
			regs[be32(attrs[nftaPayloadDreg])] = reg
		case "immediate":
			if dreg := be32(attrs[nftaImmDreg]); dreg != nftRegVerdict {
				regs[dreg] = register{kind: 'i', value: dataValue(attrs[nftaImmData])}
			} else {
				out.Verdict, out.Target = verdictOf(attrs[nftaImmData])
			}
		case "meta":
			if dreg, ok := attrs[nftaMetaDreg]; ok {
				reg := register{}
				switch be32(attrs[nftaMetaKey]) {
				case nftMetaNFProto:
					reg.kind = 'm'
				case nftMetaL4Proto:
					reg.kind = 'l'
				}
				regs[be32(dreg)] = reg
			}
		case "cmp":
			reg, value := regs[be32(attrs[nftaCmpSreg])], dataValue(attrs[nftaCmpData])
			if be32(attrs[nftaCmpOp]) != nftCmpEq {
				return
			}
			switch {
			case reg.kind == 'm' && len(value) == 1 && r.Family == "inet":
				proto = value[0]
			case len(value) == 1 && (reg.kind == 'l' || isL4ProtoField(proto, reg)):
				l4 = int(value[0])
			case reg.kind == 'p':
				matchAddr(&out.Addrs, proto, reg, value)
			case reg.kind == 't' && reg.offset == 2 && reg.length == 2 && len(value) == 2 && (l4 < 0 || dportProtocols[uint8(l4)]):
				out.DPort = binary.BigEndian.Uint16(value)
				if l4 >= 0 {
					out.L4Proto = l4Names[uint8(l4)]
				}
			}
		case "nat":
			if be32(attrs[nftaNatType]) != nftNatDNAT {
				return
			}
			if _, hasMin := attrs[nftaNatRegAddrMin]; hasMin {
				out.DNAT = addrOf(singleRegister(regs, attrs, nftaNatRegAddrMin, nftaNatRegAddrMax))
			}
			if port := singleRegister(regs, attrs, nftaNatRegProtoMin, nftaNatRegProtoMax); len(port) == 2 {
				out.DNATPort = binary.BigEndian.Uint16(port)
			}
		case "counter", "log", "limit", "quota", "reject", "masq", "notrack", "range":
			// They write no register.
		default:
			// An expression that may write registers this file does not
			// read: what they held is no longer known.
			clear(regs)
		}
	})
	if err == nil {
		err = errors.Join(inner...)
	}
	if err != nil {
		return Decoded{}, fmt.Errorf("netlink: decoding the expressions of %s %s %s handle %d: %w", r.Family, r.Table, r.Chain, r.Handle, err)
	}
	return out, nil
}

// isL4ProtoField reports whether reg holds the network header's
// transport protocol field: `ip protocol` or `ip6 nexthdr`, which nft
// also accepts as the protocol match a `tcp dport` depends on.
func isL4ProtoField(proto uint8, reg register) bool {
	return reg.kind == 'p' && reg.length == 1 &&
		((proto == nfprotoIPv4 && reg.offset == 9) || (proto == nfprotoIPv6 && reg.offset == 6))
}

// singleRegister is the immediate value a nat expression takes from the
// register its min attribute names, when its max attribute names none or
// the same register (one value, not a range); nil otherwise.
func singleRegister(regs map[uint32]register, attrs map[uint16][]byte, min, max uint16) []byte {
	minReg, ok := attrs[min]
	if !ok {
		return nil
	}
	if maxReg, ranged := attrs[max]; ranged && be32(maxReg) != be32(minReg) {
		return nil
	}
	if reg := regs[be32(minReg)]; reg.kind == 'i' {
		return reg.value
	}
	return nil
}

// verdictOf reads an NFTA_DATA nest holding a verdict: its name as nft
// lists it, and the chain a jump or goto names (the kernel sends one for
// those alone). Another verdict (continue, break, queue) is "".
func verdictOf(data []byte) (verdict, chain string) {
	eachAttr(data, func(typ uint16, b []byte) {
		if typ != nftaDataVerd {
			return
		}
		var code []byte
		eachAttr(b, func(typ uint16, v []byte) {
			switch typ {
			case nftaVerdictCode:
				code = v
			case nftaVerdictChain:
				chain = cString(v)
			}
		})
		if len(code) != 4 {
			return
		}
		switch int32(binary.BigEndian.Uint32(code)) {
		case nfAccept:
			verdict = "accept"
		case nfDrop:
			verdict = "drop"
		case nftJump:
			verdict = "jump"
		case nftGoto:
			verdict = "goto"
		case nftReturn:
			verdict = "return"
		}
	})
	return verdict, chain
}

// matchAddr records an equality match of a network-header load: the
// source or destination address of the rule's protocol, whole.
func matchAddr(out *Addrs, proto uint8, reg register, value []byte) {
	if int(reg.length) != len(value) {
		return
	}
	switch {
	case proto == nfprotoIPv4 && reg.length == 4 && reg.offset == 12, proto == nfprotoIPv6 && reg.length == 16 && reg.offset == 8:
		out.Saddr = addrOf(value)
	case proto == nfprotoIPv4 && reg.length == 4 && reg.offset == 16, proto == nfprotoIPv6 && reg.length == 16 && reg.offset == 24:
		out.Daddr = addrOf(value)
	}
}

// addrOf is the address of 4 or 16 bytes in network order (an IPv4-mapped
// IPv6 address as IPv4, as nft's listing is read); invalid otherwise.
func addrOf(b []byte) netip.Addr {
	switch len(b) {
	case 4:
		return netip.AddrFrom4([4]byte(b))
	case 16:
		return netip.AddrFrom16([16]byte(b)).Unmap()
	}
	return netip.Addr{}
}

// dataValue is the value of an NFTA_DATA nest (nil for a verdict).
func dataValue(b []byte) []byte {
	var v []byte
	eachAttr(b, func(typ uint16, d []byte) {
		if typ == nftaDataVal {
			v = d
		}
	})
	return v
}

// be32 is a big-endian u32 attribute (0 when it is none).
func be32(b []byte) uint32 {
	if len(b) != 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}
