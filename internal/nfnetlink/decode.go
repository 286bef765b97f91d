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

// nf_tables expression attributes (linux/netfilter/nf_tables.h).
const (
	nftaListElem = 1
	nftaExprName = 1
	nftaExprData = 2
	nftaDataVal  = 1

	nftaPayloadDreg   = 1
	nftaPayloadBase   = 2
	nftaPayloadOffset = 3
	nftaPayloadLen    = 4
	nftaCmpSreg       = 1
	nftaCmpOp         = 2
	nftaCmpData       = 3
	nftaImmDreg       = 1
	nftaImmData       = 2
	nftaMetaDreg      = 1
	nftaMetaKey       = 2
	nftaNatType       = 1
	nftaNatRegAddrMin = 3
	nftaNatRegAddrMax = 4

	nftPayloadNetworkHeader = 1
	nftCmpEq                = 0
	nftNatDNAT              = 1
	nftMetaNFProto          = 15
	nfprotoIPv4             = 2
	nfprotoIPv6             = 10
	nftRegVerdict           = 0
)

// Addrs is what a rule says of addresses, as nft lists them: each is
// invalid when the rule has none, or none that is one address.
type Addrs struct {
	Saddr, Daddr, DNAT netip.Addr
}

// register is what the decoding knows a register holds.
type register struct {
	kind           byte // 0: unknown; 'p': a network-header payload; 'i': an immediate; 'm': the nfproto meta
	offset, length uint32
	value          []byte
}

// Addrs decodes the addresses of r's expressions (see the file's head).
// A rule of an inet table matches an address only after a `meta nfproto`
// match names its protocol, as nft requires; ip and ip6 tables have one.
func (r Rule) Addrs() (Addrs, error) {
	var out Addrs
	proto := map[string]uint8{"ip": nfprotoIPv4, "ip6": nfprotoIPv6}[r.Family]
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
			if be32(attrs[nftaPayloadBase]) == nftPayloadNetworkHeader {
				reg = register{kind: 'p', offset: be32(attrs[nftaPayloadOffset]), length: be32(attrs[nftaPayloadLen])}
			}
			regs[be32(attrs[nftaPayloadDreg])] = reg
		case "immediate":
			if dreg := be32(attrs[nftaImmDreg]); dreg != nftRegVerdict {
				regs[dreg] = register{kind: 'i', value: dataValue(attrs[nftaImmData])}
			}
		case "meta":
			if dreg, ok := attrs[nftaMetaDreg]; ok {
				reg := register{}
				if be32(attrs[nftaMetaKey]) == nftMetaNFProto {
					reg.kind = 'm'
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
			case reg.kind == 'p':
				matchAddr(&out, proto, reg, value)
			}
		case "nat":
			_, ranged := attrs[nftaNatRegAddrMax]
			min, hasMin := attrs[nftaNatRegAddrMin]
			if be32(attrs[nftaNatType]) != nftNatDNAT || !hasMin {
				return
			}
			out.DNAT = netip.Addr{}
			if reg := regs[be32(min)]; reg.kind == 'i' && (!ranged || be32(attrs[nftaNatRegAddrMax]) == be32(min)) {
				out.DNAT = addrOf(reg.value)
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
		return Addrs{}, fmt.Errorf("netlink: decoding the expressions of %s %s %s handle %d: %w", r.Family, r.Table, r.Chain, r.Handle, err)
	}
	return out, nil
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
