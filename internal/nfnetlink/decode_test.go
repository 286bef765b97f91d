package nfnetlink

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// nla encodes one netlink attribute.
func nla(typ uint16, data []byte) []byte {
	n := nlaHeaderLen + len(data)
	b := binary.NativeEndian.AppendUint16(nil, uint16(n))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	return append(b, make([]byte, align4(n)-n)...)
}

func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// expr encodes one expression of a rule's list.
func expr(name string, attrs ...[]byte) []byte {
	return nla(nftaListElem|0x8000, cat(nla(nftaExprName, strz(name)), nla(nftaExprData|0x8000, cat(attrs...))))
}

func payload(dreg, offset, length uint32) []byte {
	return expr("payload", nla(nftaPayloadDreg, u32(dreg)), nla(nftaPayloadBase, u32(nftPayloadNetworkHeader)),
		nla(nftaPayloadOffset, u32(offset)), nla(nftaPayloadLen, u32(length)))
}

func cmp(sreg, op uint32, value []byte) []byte {
	return expr("cmp", nla(nftaCmpSreg, u32(sreg)), nla(nftaCmpOp, u32(op)), nla(nftaCmpData|0x8000, nla(nftaDataVal, value)))
}

func immediate(dreg uint32, value []byte) []byte {
	return expr("immediate", nla(nftaImmDreg, u32(dreg)), nla(nftaImmData|0x8000, nla(nftaDataVal, value)))
}

func nfproto4(reg uint32) []byte {
	return cat(expr("meta", nla(nftaMetaKey, u32(nftMetaNFProto)), nla(nftaMetaDreg, u32(reg))), cmp(reg, nftCmpEq, []byte{nfprotoIPv4}))
}

func dnat(min uint32, max ...uint32) []byte {
	attrs := [][]byte{nla(nftaNatType, u32(nftNatDNAT)), nla(nftaNatRegAddrMin, u32(min))}
	for _, m := range max {
		attrs = append(attrs, nla(nftaNatRegAddrMax, u32(m)))
	}
	return expr("nat", attrs...)
}

func TestRuleAddrsReadsWhatNftWouldList(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	v6 := netip.MustParseAddr("fd00:198:18::1")
	for _, tc := range []struct {
		name   string
		family string
		expr   []byte
		want   Addrs
	}{
		{"ip daddr == A in an ip table", "ip", cat(payload(1, 16, 4), cmp(1, nftCmpEq, a.AsSlice())), Addrs{Daddr: a}},
		{"ip saddr == A, then dnat to B", "ip", cat(payload(1, 12, 4), cmp(1, nftCmpEq, a.AsSlice()), immediate(1, b.AsSlice()), dnat(1)),
			Addrs{Saddr: a, DNAT: b}},
		{"ip daddr != A is no address", "ip", cat(payload(1, 16, 4), cmp(1, 1, a.AsSlice())), Addrs{}},
		{"a prefix (a mask between load and compare) is no address", "ip",
			cat(payload(1, 16, 4), expr("bitwise", nla(1, u32(1)), nla(2, u32(1))), cmp(1, nftCmpEq, a.AsSlice())), Addrs{}},
		{"a byte-aligned prefix (a shorter load) is no address", "ip", cat(payload(1, 16, 3), cmp(1, nftCmpEq, a.AsSlice()[:3])), Addrs{}},
		{"ip6 daddr == A in an ip6 table", "ip6", cat(payload(1, 24, 16), cmp(1, nftCmpEq, v6.AsSlice())), Addrs{Daddr: v6}},
		{"an inet table's address match needs its nfproto first", "inet", cat(payload(1, 16, 4), cmp(1, nftCmpEq, a.AsSlice())), Addrs{}},
		{"an inet table's ip daddr after meta nfproto ipv4", "inet", cat(nfproto4(1), payload(1, 16, 4), cmp(1, nftCmpEq, a.AsSlice())), Addrs{Daddr: a}},
		{"a dnat range is no address", "ip", cat(immediate(1, a.AsSlice()), immediate(2, b.AsSlice()), dnat(1, 2)), Addrs{}},
		{"a dnat from a register another expression wrote is no address", "ip",
			cat(immediate(1, a.AsSlice()), expr("lookup", nla(3, u32(1))), dnat(1)), Addrs{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Rule{Family: tc.family, Expr: tc.expr}.Addrs()
			if err != nil || got != tc.want {
				t.Fatalf("Addrs() = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func transport(dreg, offset, length uint32) []byte {
	return expr("payload", nla(nftaPayloadDreg, u32(dreg)), nla(nftaPayloadBase, u32(nftPayloadTransportHeader)),
		nla(nftaPayloadOffset, u32(offset)), nla(nftaPayloadLen, u32(length)))
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// l4proto is `meta l4proto <proto>`, as nft writes the dependency of a
// `tcp dport` match.
func l4proto(reg uint32, proto byte) []byte {
	return cat(expr("meta", nla(nftaMetaKey, u32(nftMetaL4Proto)), nla(nftaMetaDreg, u32(reg))), cmp(reg, nftCmpEq, []byte{proto}))
}

// dport is `<proto> dport == port` (th dport without a protocol).
func dport(proto byte, port uint16) []byte {
	var dep []byte
	if proto != 0 {
		dep = l4proto(1, proto)
	}
	return cat(dep, transport(1, 2, 2), cmp(1, nftCmpEq, be16(port)))
}

// dnatPorts is a nat expression of type DNAT taking its address from
// addrReg and its ports from the registers given (min, then max).
func dnatPorts(addrReg uint32, ports ...uint32) []byte {
	attrs := [][]byte{nla(nftaNatType, u32(nftNatDNAT)), nla(nftaNatRegAddrMin, u32(addrReg)), nla(nftaNatRegAddrMax, u32(addrReg))}
	for i, p := range ports {
		attrs = append(attrs, nla(uint16(nftaNatRegProtoMin+i), u32(p)))
	}
	return expr("nat", attrs...)
}

// verdict is an immediate to the verdict register: code, and a chain
// for a jump or goto.
func verdict(code int32, chain string) []byte {
	v := nla(nftaVerdictCode, u32(uint32(code)))
	if chain != "" {
		v = cat(v, nla(nftaVerdictChain, strz(chain)))
	}
	return expr("immediate", nla(nftaImmDreg, u32(nftRegVerdict)), nla(nftaImmData|0x8000, nla(nftaDataVerd|0x8000, v)))
}

func TestRuleDecodeReadsPortsAndVerdictsAsNftWouldListThem(t *testing.T) {
	a := netip.MustParseAddr("198.18.1.2")
	const tcp, udp, icmp = 6, 17, 1
	for _, tc := range []struct {
		name   string
		family string
		expr   []byte
		want   Decoded
	}{
		{"tcp dport 28084 dnat to A:80 (portmap's rule)", "ip", cat(dport(tcp, 28084), immediate(1, a.AsSlice()), immediate(2, be16(80)), dnatPorts(1, 2, 2)),
			Decoded{Addrs: Addrs{DNAT: a}, DPort: 28084, DNATPort: 80, L4Proto: "tcp"}},
		{"udp dport 53 in an inet table, no nfproto needed", "inet", dport(udp, 53), Decoded{DPort: 53, L4Proto: "udp"}},
		{"th dport 99 without a protocol match", "ip", dport(0, 99), Decoded{DPort: 99}},
		{"ip protocol tcp as the dependency", "ip", cat(payload(1, 9, 1), cmp(1, nftCmpEq, []byte{tcp}), transport(1, 2, 2), cmp(1, nftCmpEq, be16(7))), Decoded{DPort: 7, L4Proto: "tcp"}},
		{"icmp's bytes 2 and 3 are its checksum, no port", "ip", dport(icmp, 5), Decoded{}},
		{"nor after ip protocol icmp", "ip", cat(payload(1, 9, 1), cmp(1, nftCmpEq, []byte{icmp}), transport(1, 2, 2), cmp(1, nftCmpEq, be16(5))), Decoded{}},
		{"tcp dport != 80 is no port", "ip", cat(l4proto(1, tcp), transport(1, 2, 2), cmp(1, 1, be16(80))), Decoded{}},
		{"tcp sport is no dport", "ip", cat(l4proto(1, tcp), transport(1, 0, 2), cmp(1, nftCmpEq, be16(80))), Decoded{}},
		{"a dnat to a port range is no port", "ip", cat(dport(tcp, 90), immediate(1, a.AsSlice()), immediate(2, be16(80)), immediate(3, be16(90)), dnatPorts(1, 2, 3)),
			Decoded{Addrs: Addrs{DNAT: a}, DPort: 90, L4Proto: "tcp"}},
		{"a dnat to an address alone has no port", "ip", cat(dport(0, 99), immediate(1, a.AsSlice()), dnatPorts(1)), Decoded{Addrs: Addrs{DNAT: a}, DPort: 99}},
		{"a dnat port from a register another expression wrote is no port", "ip",
			cat(immediate(1, a.AsSlice()), immediate(2, be16(80)), expr("lookup", nla(3, u32(2))), dnatPorts(1, 2, 2)), Decoded{}},
		{"accept", "ip", verdict(nfAccept, ""), Decoded{Verdict: "accept"}},
		{"drop", "ip", verdict(nfDrop, ""), Decoded{Verdict: "drop"}},
		{"ip daddr 224.0.0.0/4 return", "inet", cat(nfproto4(1), payload(1, 16, 4), expr("bitwise", nla(1, u32(1)), nla(2, u32(1))), cmp(1, nftCmpEq, []byte{224, 0, 0, 0}), verdict(nftReturn, "")),
			Decoded{Verdict: "return"}},
		{"jump hostports_all", "ip", verdict(nftJump, "hostports_all"), Decoded{Verdict: "jump", Target: "hostports_all"}},
		{"goto masq_checks", "inet", verdict(nftGoto, "masq_checks"), Decoded{Verdict: "goto", Target: "masq_checks"}},
		{"continue is no verdict nft ends a listed rule in", "ip", verdict(-1, ""), Decoded{}},
		{"masquerade ends in no verdict", "ip", cat(payload(1, 12, 4), cmp(1, nftCmpEq, a.AsSlice()), expr("masq")), Decoded{Addrs: Addrs{Saddr: a}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Rule{Family: tc.family, Expr: tc.expr}
			got, err := r.Decode()
			if err != nil || got != tc.want {
				t.Fatalf("Decode() = %+v, %v; want %+v", got, err, tc.want)
			}
			if addrs, err := r.Addrs(); err != nil || addrs != tc.want.Addrs {
				t.Errorf("Addrs() = %+v, %v; want %+v, as Decode says", addrs, err, tc.want.Addrs)
			}
		})
	}
}

func TestRuleAddrsRefusesCutExpressions(t *testing.T) {
	whole := cat(payload(1, 16, 4), cmp(1, nftCmpEq, []byte{198, 18, 0, 1}))
	for _, cut := range []int{6, len(whole) - 5} {
		if _, err := (Rule{Family: "ip", Expr: whole[:cut]}).Addrs(); err == nil {
			t.Errorf("expressions cut to %d of %d bytes: no error", cut, len(whole))
		}
	}
}

// FuzzRuleAddrs: any bytes a kernel could send are decoded or refused,
// never a panic, and the same way each time.
func FuzzRuleAddrs(f *testing.F) {
	f.Add("ip", cat(payload(1, 16, 4), cmp(1, nftCmpEq, []byte{198, 18, 0, 1}), immediate(1, []byte{198, 18, 0, 2}), dnat(1)))
	f.Add("inet", cat(nfproto4(1), payload(1, 12, 4), cmp(1, nftCmpEq, []byte{198, 18, 0, 1})))
	f.Add("ip", cat(dport(6, 28084), immediate(1, []byte{198, 18, 1, 2}), immediate(2, be16(80)), dnatPorts(1, 2, 2), verdict(nftJump, "x")))
	f.Fuzz(func(t *testing.T, family string, b []byte) {
		r := Rule{Family: family, Expr: b}
		first, err1 := r.Decode()
		second, err2 := r.Decode()
		if first != second || (err1 == nil) != (err2 == nil) {
			t.Fatalf("decoded twice differently: %+v (%v), %+v (%v)", first, err1, second, err2)
		}
	})
}
