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
	f.Fuzz(func(t *testing.T, family string, b []byte) {
		r := Rule{Family: family, Expr: b}
		first, err1 := r.Addrs()
		second, err2 := r.Addrs()
		if first != second || (err1 == nil) != (err2 == nil) {
			t.Fatalf("decoded twice differently: %+v (%v), %+v (%v)", first, err1, second, err2)
		}
	})
}
