package footprint

import "net/netip"

// MayMentionOther implements OtherAddrScanner: a rule that jumps to one of
// except carries that chain's name in its verdict, byte for byte, so the
// attachment's own rules are told from others' without decoding them.
func (h *nfIPTables) MayMentionOther(table, chain string, addrs []netip.Addr, except []string) (bool, error) {
	if err := h.sameBinary(); err != nil {
		return true, err
	}
	raw := addrBytes(addrs)
	own := make([][]byte, len(except))
	for i, name := range except {
		own[i] = []byte(name)
	}
	found, err := nfAnyRule(h.family, table, chain, func(r nlRule) bool {
		return r.mentions(raw) && (len(own) == 0 || !r.mentions(own))
	})
	return found || err != nil, err
}
