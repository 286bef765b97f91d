package footprint

import (
	"net/netip"
	"slices"
	"sort"

	"github.com/seed1280861d/cninet/internal/iptables"
)

// chainsOf returns the chain name fn derives for each of the set's
// attachments.
func chainsOf(set attSet, fn func(Attachment) string) []string {
	out := make([]string, 0, len(set))
	for _, a := range set.sorted() {
		out = append(out, fn(a))
	}
	return out
}

// commentIndex maps each stored comment of the set's attachments to the
// attachments that could have written it: cut comments can stand for
// several.
func commentIndex(set attSet, comment func(Attachment) string) map[string][]Attachment {
	index := make(map[string][]Attachment, len(set))
	for _, a := range set.sorted() {
		stored := iptables.StoredComment(comment(a))
		index[stored] = append(index[stored], a)
	}
	return index
}

// ownerIn returns the candidate that owns r, nil when none does.
func ownerIn(r iptables.Rule, candidates []Attachment, owns func(Attachment, iptables.Rule) bool) *Attachment {
	for i := range candidates {
		if owns(candidates[i], r) {
			return &candidates[i]
		}
	}
	return nil
}

// familyAddrs returns the addresses of one family.
func familyAddrs(addrs []netip.Addr, v6 bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if a.Is6() == v6 {
			out = append(out, a)
		}
	}
	return out
}

// addrSet is a set of addresses.
type addrSet map[netip.Addr]bool

func newAddrSet(addrs []netip.Addr) addrSet {
	s := make(addrSet, len(addrs))
	for _, a := range addrs {
		s[a] = true
	}
	return s
}

// list returns the set's addresses of one family, sorted.
func (s addrSet) list(v6 bool) []netip.Addr {
	var out []netip.Addr
	for a := range s {
		if a.Is6() == v6 {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// all returns the set's addresses, sorted.
func (s addrSet) all() []netip.Addr { return append(s.list(false), s.list(true)...) }

// known reports whether a's network is one the run knows.
func (v *view) known(a Attachment) bool {
	_, ok := v.nets[a.Network]
	return ok
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
