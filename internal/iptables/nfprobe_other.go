package iptables

import (
	"net/netip"

	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

// MayMentionOther implements OtherAddrScanner: a rule that jumps to one of
// except carries that chain's name in its verdict, byte for byte, so the
// attachment's own rules are told from others' without decoding them.
func (h *nfIPTables) MayMentionOther(table, chain string, addrs []netip.Addr, except []string) (bool, error) {
	if err := h.sameBinary(); err != nil {
		return true, err
	}
	raw := nfnetlink.AddrBytes(addrs)
	own := make([][]byte, len(except))
	for i, name := range except {
		own[i] = []byte(name)
	}
	found, err := nfnetlink.AnyRule(h.family, table, chain, func(r nfnetlink.Rule) bool {
		return r.Mentions(raw) && (len(own) == 0 || !r.Mentions(own))
	})
	return found || err != nil, err
}
