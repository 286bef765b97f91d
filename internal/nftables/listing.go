package nftables

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/seed1280861d/cninet/host"
)

// The shape of `nft -j list ...` output that rules are read from.
type (
	nftJSONRule struct {
		Family  string          `json:"family"`
		Table   string          `json:"table"`
		Chain   string          `json:"chain"`
		Handle  int             `json:"handle"`
		Comment string          `json:"comment"`
		Expr    json.RawMessage `json:"expr"`
	}
	nftMatch struct {
		Op   string `json:"op"`
		Left struct {
			Payload *struct {
				Protocol string `json:"protocol"`
				Field    string `json:"field"`
			} `json:"payload"`
		} `json:"left"`
		Right json.RawMessage `json:"right"`
	}
	nftNAT struct {
		Addr json.RawMessage `json:"addr"`
		Port json.RawMessage `json:"port"`
	}
	nftJump struct {
		Target string `json:"target"`
	}
	// nftExpr is one expression; a verdict without an argument is
	// listed as {"accept": null}, which leaves its field "null".
	nftExpr struct {
		Match  *nftMatch       `json:"match"`
		DNAT   *nftNAT         `json:"dnat"`
		Jump   *nftJump        `json:"jump"`
		Goto   *nftJump        `json:"goto"`
		Accept json.RawMessage `json:"accept"`
		Drop   json.RawMessage `json:"drop"`
		Return json.RawMessage `json:"return"`
	}
)

// ParseListing reads the rules of `nft -j list table|chain|ruleset`
// output. Objects other than rules (tables, chains, metainfo) are skipped;
// an expression it does not know leaves the rule's addresses, ports and
// verdict as they are.
func ParseListing(out []byte) ([]host.NFTRule, error) {
	return readNFTListing(bytes.NewReader(out), true, nil, nil)
}

// readNFTListing is ParseListing reading from a stream, appending to
// rules: one object of the listing is decoded at a time, so a big table
// is never held as text and as parsed rules at once. Without keepExpr the
// rules' Expr is dropped once read: most of a rule's size, needed only to
// add it back. With comments, equal comments share one copy (portmap's
// rules of an attachment all carry its id): comments is where they are
// kept, across the tables of one listing.
func readNFTListing(r io.Reader, keepExpr bool, rules []host.NFTRule, comments map[string]string) ([]host.NFTRule, error) {
	dec := json.NewDecoder(r)
	if err := enterNFTObjects(dec); err != nil {
		return nil, fmt.Errorf("reading nft JSON: %w", err)
	}
	for dec.More() {
		var obj struct {
			Rule *nftJSONRule `json:"rule"` // other objects are skipped unread
		}
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("reading nft JSON: %w", err)
		}
		if obj.Rule == nil {
			continue
		}
		r, err := parseNFTRule(obj.Rule)
		if err != nil {
			return nil, err
		}
		if !keepExpr {
			r.Expr = nil
		}
		if comments != nil {
			if shared, ok := comments[r.Comment]; ok {
				r.Comment = shared
			} else {
				comments[r.Comment] = r.Comment
			}
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// enterNFTObjects moves dec into the array of `{"nftables": [...]}`.
func enterNFTObjects(dec *json.Decoder) error {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("not an nft JSON document (%v)", err)
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return err
		}
		if key != "nftables" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
			continue
		}
		if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
			return fmt.Errorf("\"nftables\" is not an array (%v)", err)
		}
		return nil
	}
	return errors.New("no \"nftables\" array")
}

// parseNFTRule reads the addresses, ports and verdict of one rule's
// expressions, decoded in one pass (readExpr). An expression of another
// shape than those it knows leaves the rule as it is.
func parseNFTRule(jr *nftJSONRule) (host.NFTRule, error) {
	r := host.NFTRule{Family: nftName(jr.Family), Table: nftName(jr.Table), Chain: nftName(jr.Chain), Handle: jr.Handle, Comment: jr.Comment, Expr: jr.Expr}
	if len(jr.Expr) == 0 {
		return r, nil
	}
	if bytes.TrimLeft(jr.Expr, " \t\r\n")[0] != '[' {
		return host.NFTRule{}, fmt.Errorf("reading nft rule expressions: %s is not an array", jr.Expr)
	}
	var exprs []nftExpr
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(jr.Expr, &exprs); err != nil && !errors.As(err, &typeErr) {
		return host.NFTRule{}, fmt.Errorf("reading nft rule expressions: %w", err)
	}
	for _, e := range exprs {
		readExpr(&r, e)
	}
	return r, nil
}

// nftNames are the family, table and chain names of the plugins' rules
// (ShareNames): a listing of tens of thousands of rules shares one copy of
// each.
var nftNames = map[string]string{}

// ShareNames makes every listing share one copy of each of names, which
// it then holds for every rule that names them. It is for package
// initialization: it must not run while a listing is read.
func ShareNames(names ...string) {
	for _, n := range names {
		nftNames[n] = n
	}
}

// nftName returns the shared copy of a name the plugins use, else s.
func nftName(s string) string {
	if shared, ok := nftNames[s]; ok {
		return shared
	}
	return s
}

// readExpr reads what one expression says of the rule: an address or
// destination port it matches, where a DNAT translates to, its verdict.
func readExpr(r *host.NFTRule, expr nftExpr) {
	switch {
	case expr.DNAT != nil:
		r.DNAT, _ = jsonAddr(expr.DNAT.Addr)
		r.DNATPort, _ = jsonPort(expr.DNAT.Port)
	case expr.Match != nil && expr.Match.Op == "==" && expr.Match.Left.Payload != nil:
		readMatch(r, expr.Match.Left.Payload.Protocol, expr.Match.Left.Payload.Field, expr.Match.Right)
	case expr.Jump != nil:
		r.Verdict, r.Target = "jump", nftName(expr.Jump.Target)
	case expr.Goto != nil:
		r.Verdict, r.Target = "goto", nftName(expr.Goto.Target)
	case expr.Accept != nil:
		r.Verdict, r.Target = "accept", ""
	case expr.Drop != nil:
		r.Verdict, r.Target = "drop", ""
	case expr.Return != nil:
		r.Verdict, r.Target = "return", ""
	}
}

// readMatch reads an equality match of a payload field: an address of
// ip or ip6, or a destination port.
func readMatch(r *host.NFTRule, protocol, field string, right json.RawMessage) {
	switch {
	case (protocol == "ip" || protocol == "ip6") && (field == "saddr" || field == "daddr"):
		addr, ok := jsonAddr(right)
		if !ok {
			return
		}
		if field == "saddr" {
			r.Saddr = addr
		} else {
			r.Daddr = addr
		}
	case field == "dport": // of tcp, udp, sctp, dccp, udplite, th: a port in each
		if port, ok := jsonPort(right); ok {
			r.DPort = port
			if protocol != "th" {
				r.L4Proto = protocol
			}
		}
	}
}

// jsonPort reads a single port: a number, not a range or a set.
func jsonPort(raw json.RawMessage) (uint16, bool) {
	var p uint16
	if len(raw) == 0 || json.Unmarshal(raw, &p) != nil {
		return 0, false
	}
	return p, true
}

// jsonAddr reads a single address: a plain string (nft lists a /32 or
// /128 prefix as one too), not a prefix object or a set.
func jsonAddr(raw json.RawMessage) (netip.Addr, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	return a.Unmap(), err == nil
}

// ruleChunk is how many rules one chunk of a ruleChunks holds: about
// 900 KB of host.NFTRule.
const ruleChunk = 4096

// ruleChunks gathers a listing's rules in chunks that never move, and
// copies them once, at the end, into a slice of their exact number. A GC
// sweep of 10,000 leaked attachments lists 70,000 rules: grown by
// append, their slice was copied at every growth, held up to 2.25 times
// their size at once while it grew, and left four times their size
// behind for the collector. The zero value is empty and ready.
type ruleChunks struct {
	chunks [][]host.NFTRule // each but the last full
	n      int
}

func (c *ruleChunks) add(r host.NFTRule) {
	if len(c.chunks) == 0 || len(c.chunks[len(c.chunks)-1]) == ruleChunk {
		c.chunks = append(c.chunks, make([]host.NFTRule, 0, ruleChunk))
	}
	last := len(c.chunks) - 1
	c.chunks[last] = append(c.chunks[last], r)
	c.n++
}

// truncate forgets every rule after the first n (n ≤ the number held):
// a table's dump that begins again forgets what it listed before.
func (c *ruleChunks) truncate(n int) {
	keep := (n + ruleChunk - 1) / ruleChunk // chunks holding one of the first n
	clear(c.chunks[keep:])
	c.chunks = c.chunks[:keep]
	if keep > 0 {
		c.chunks[keep-1] = c.chunks[keep-1][:n-(keep-1)*ruleChunk]
	}
	c.n = n
}

// all returns the rules held, in the order added; nil when there are
// none.
func (c *ruleChunks) all() []host.NFTRule {
	if c.n == 0 {
		return nil
	}
	out := make([]host.NFTRule, 0, c.n)
	for _, chunk := range c.chunks {
		out = append(out, chunk...)
	}
	return out
}
