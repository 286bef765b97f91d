package registry

import (
	"bytes"
	"net/netip"

	"github.com/seed1280861d/cninet/internal/identity"
)

// Naming returns, as Summaries does, the records that may name one of
// addrs: a record whose bytes cannot hold any of them is not decoded.
// A Teardown asks it, for its own addresses, whether another attachment
// holds one: each record it skips costs a search of its bytes instead of
// a decoding, and the answer is the one Summaries gives.
//
//   - An IPv4 address has one text form (netip refuses any other), which
//     a record's JSON holds between quotes unless it escapes a character
//     of it; a record with an escape ("\") is decoded.
//   - An IPv6 address has several forms: when addrs holds one, every
//     record is decoded.
//
// Damaged lists only the records it decoded.
func (g *Registry) Naming(addrs []netip.Addr) (Summaries, error) {
	needles, ok := quotedTexts(addrs)
	if !ok {
		return g.Summaries()
	}
	type maybe struct {
		s     Summary
		named bool
	}
	read, damaged, err := readAll(g, decoding(func(raw []byte, path string, k identity.Key) (maybe, error) {
		if !mayName(raw, needles) {
			return maybe{}, nil
		}
		s, err := decodeSummary(raw, path, k)
		return maybe{s, true}, err
	}))
	var sums []Summary
	for _, m := range read {
		if m.named {
			sums = append(sums, m.s)
		}
	}
	return Summaries{Summaries: sums, Damaged: damaged}, err
}

// quotedTexts returns each address's text between JSON quotes; ok is
// false when one of them is IPv6 (or no address at all is given).
func quotedTexts(addrs []netip.Addr) (texts [][]byte, ok bool) {
	for _, a := range addrs {
		if !a.Is4() {
			return nil, false
		}
		texts = append(texts, []byte(`"`+a.String()+`"`))
	}
	return texts, len(texts) > 0
}

// mayName reports whether raw may hold one of the quoted texts once
// decoded: it holds one as it is, or has an escape that may hide one.
func mayName(raw []byte, quoted [][]byte) bool {
	if bytes.IndexByte(raw, '\\') >= 0 {
		return true
	}
	for _, q := range quoted {
		if bytes.Contains(raw, q) {
			return true
		}
	}
	return false
}
