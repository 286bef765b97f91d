package fakes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/seed1280861d/cninet/host"
)

// RunScript implements host.NFTScriptRunner for the script that
// sigs.k8s.io/knftables renders for a transaction (Transaction.String),
// as the plugins' nftables backends write them, one command a line:
//
//	add table <family> <table> [{ comment "<c>" ; }]
//	add chain <family> <table> <chain> [{ [type <t> hook <h> priority <p> ;] [comment "<c>" ;] }]
//	flush chain <family> <table> <chain>
//	flush table <family> <table>
//	add rule <family> <table> <chain> <expression> [comment "<c>"]
//	delete rule <family> <table> <chain> handle <n>
//
// An added rule gets the next handle of its table and the fields nft's
// listing would give it (Saddr, Daddr, DNAT, DPort, DNATPort, Verdict,
// Target; no Expr), read from the expression's words: `ip[6] saddr|daddr
// [==|!=] <addr or prefix>`, `<tcp|udp|th|sctp|dccp|udplite> dport|sport
// [==|!=] <port>`, `meta l4proto|nfproto <v>`, `fib <field> type
// [!=] <v>`, `iifname|oifname [!=] <name>`, `counter`, `masquerade`,
// `dnat [ip|ip6] to <addr>[:<port>]`, `jump|goto <chain>`, `return`,
// `accept`, `drop`. A set, a map, a range or any other word is not read:
// the line is an error that names it. As in nft, a table or chain that
// is not there, or a rule handle that is not, fails the script. The
// script applies all or nothing.
func (f *NFTables) RunScript(_ context.Context, script string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	lines := strings.Split(strings.TrimRight(script, "\n"), "\n")
	f.calls = append(f.calls, fmt.Sprintf("RunScript %d", len(lines)))
	if f.FailScript != nil {
		return f.FailScript
	}
	work := f.state.clone()
	applied := 0
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := work.apply(line); err != nil {
			return fmt.Errorf("nft -f -: line %d: %q: %w", i+1, line, err)
		}
		applied++
	}
	f.state = work
	if applied > 0 {
		f.changed()
	}
	return nil
}

// errNoSuchObject is nft's answer for a table, chain or rule that is
// not there.
var errNoSuchObject = errors.New("Error: Could not process rule: No such file or directory")

// errUnreadable says the fake does not read a command or expression.
var errUnreadable = errors.New("not in the subset of nft the fake reads (see RunScript)")

// apply applies one command of a script.
func (s *nftState) apply(line string) error {
	words := strings.Fields(line)
	if len(words) < 4 {
		return errUnreadable
	}
	t := host.NFTable{Family: words[2], Name: words[3]}
	switch words[2] {
	case "ip", "ip6", "inet":
	default:
		return fmt.Errorf("family %q: %w", words[2], errUnreadable)
	}
	verb := words[0] + " " + words[1]
	switch verb {
	case "add table", "flush table", "add chain", "flush chain", "add rule", "delete rule":
	default:
		return fmt.Errorf("%q: %w", verb, errUnreadable)
	}
	if verb != "add table" && !s.tables[t] {
		return fmt.Errorf("table %s: %w", t, errNoSuchObject)
	}
	if s.tables == nil {
		s.tables, s.chains, s.handles = map[host.NFTable]bool{}, map[nftChain]bool{}, map[host.NFTable]int{}
	}
	switch verb {
	case "add table":
		if err := readBlock(words[4:], false); err != nil {
			return err
		}
		s.tables[t] = true
		return nil
	case "flush table":
		if len(words) != 4 {
			return errUnreadable
		}
		s.dropRules(func(r host.NFTRule) bool { return r.Family == t.Family && r.Table == t.Name })
		return nil
	}
	if len(words) < 5 {
		return errUnreadable
	}
	chain := nftChain{t, words[4]}
	if verb == "add chain" {
		if err := readBlock(words[5:], true); err != nil {
			return err
		}
		s.chains[chain] = true
		return nil
	}
	if !s.chains[chain] {
		return fmt.Errorf("chain %s %s: %w", t, chain.name, errNoSuchObject)
	}
	inChain := func(r host.NFTRule) bool { return r.Family == t.Family && r.Table == t.Name && r.Chain == chain.name }
	switch verb {
	case "flush chain":
		if len(words) != 5 {
			return errUnreadable
		}
		s.dropRules(inChain)
	case "delete rule":
		if len(words) != 7 || words[5] != "handle" {
			return errUnreadable
		}
		handle, err := strconv.Atoi(words[6])
		i := s.index(t, chain.name, handle)
		if err != nil || i < 0 {
			return fmt.Errorf("rule handle %s: %w", words[6], errNoSuchObject)
		}
		s.rules = append(s.rules[:i:i], s.rules[i+1:]...)
	case "add rule":
		r, err := readRule(t, chain.name, line)
		if err != nil {
			return err
		}
		s.add(r, true)
	}
	return nil
}

func (s *nftState) dropRules(drop func(host.NFTRule) bool) {
	kept := s.rules[:0:0]
	for _, r := range s.rules {
		if !drop(r) {
			kept = append(kept, r)
		}
	}
	s.rules = kept
}

// blockStatement is one statement of a table's or chain's { ... } block
// as knftables writes it.
var blockStatement = regexp.MustCompile(`^(?:type \S+ hook \S+(?: device "[^"]*")? priority \S+|comment "(?:[^"\\]|\\.)*")$`)

// readBlock checks the { ... } block after a table or chain: a comment,
// and for a chain (base) its type, hook and priority.
func readBlock(words []string, chain bool) error {
	if len(words) == 0 {
		return nil
	}
	text := strings.Join(words, " ")
	if !strings.HasPrefix(text, "{") || !strings.HasSuffix(text, "}") {
		return fmt.Errorf("block %q: %w", text, errUnreadable)
	}
	for _, st := range strings.Split(strings.Trim(text, "{} "), ";") {
		st = strings.TrimSpace(st)
		if st == "" {
			continue
		}
		if !blockStatement.MatchString(st) || (!chain && !strings.HasPrefix(st, "comment ")) {
			return fmt.Errorf("block statement %q: %w", st, errUnreadable)
		}
	}
	return nil
}

// ruleComment is an `add rule` line's trailing comment, quoted as
// knftables quotes it (Go's %q).
var ruleComment = regexp.MustCompile(`\s+comment\s+("(?:[^"\\]|\\.)*")\s*$`)

// readRule reads an `add rule <family> <table> <chain> <expression>
// [comment "<c>"]` line into the rule nft would list.
func readRule(t host.NFTable, chain, line string) (host.NFTRule, error) {
	r := host.NFTRule{Family: t.Family, Table: t.Name, Chain: chain}
	if m := ruleComment.FindStringSubmatchIndex(line); m != nil {
		comment, err := strconv.Unquote(line[m[2]:m[3]])
		if err != nil {
			return host.NFTRule{}, fmt.Errorf("comment %s: %w", line[m[2]:m[3]], err)
		}
		r.Comment, line = comment, line[:m[0]]
	}
	words := strings.Fields(line)[5:]
	if len(words) == 0 {
		return host.NFTRule{}, fmt.Errorf("no expression: %w", errUnreadable)
	}
	for len(words) > 0 {
		n, err := readStatement(&r, words)
		if err != nil {
			return host.NFTRule{}, err
		}
		words = words[n:]
	}
	return r, nil
}

// dportProtocols are the protocols whose `dport` nft lists as a port.
var dportProtocols = map[string]bool{"tcp": true, "udp": true, "th": true, "sctp": true, "dccp": true, "udplite": true}

// readStatement reads the statement words begin with into r and says
// how many words it took.
func readStatement(r *host.NFTRule, words []string) (int, error) {
	unreadable := func() (int, error) {
		return 0, fmt.Errorf("expression at %q: %w", strings.Join(words, " "), errUnreadable)
	}
	switch w := words[0]; {
	case w == "counter" || w == "masquerade":
		return 1, nil
	case w == "return" || w == "accept" || w == "drop":
		r.Verdict, r.Target = w, ""
		return 1, nil
	case (w == "jump" || w == "goto") && len(words) >= 2:
		r.Verdict, r.Target = w, words[1]
		return 2, nil
	case w == "dnat":
		n := 1
		if n < len(words) && (words[n] == "ip" || words[n] == "ip6") {
			n++
		}
		if n+1 >= len(words) || words[n] != "to" {
			return unreadable()
		}
		addr, port, ok := dnatTarget(words[n+1])
		if !ok {
			return unreadable()
		}
		r.DNAT, r.DNATPort = addr, port
		return n + 2, nil
	case w == "fib":
		for n := 1; n+1 < len(words); n++ {
			if words[n] == "type" {
				op, value := operator(words[n+1:])
				if value == "" {
					return unreadable()
				}
				return n + 1 + op + 1, nil
			}
		}
		return unreadable()
	}
	var from int // where the matched value's operator or value is
	switch w := words[0]; {
	case w == "iifname" || w == "oifname":
		from = 1
	case len(words) < 2:
		return unreadable()
	case w == "meta" && (words[1] == "l4proto" || words[1] == "nfproto"),
		(w == "ip" || w == "ip6") && (words[1] == "saddr" || words[1] == "daddr"),
		dportProtocols[w] && (words[1] == "dport" || words[1] == "sport"):
		from = 2
	default:
		return unreadable()
	}
	op, value := operator(words[from:])
	if value == "" {
		return unreadable()
	}
	equal := op == 0 || words[from] == "=="
	switch {
	case words[0] == "ip" || words[0] == "ip6":
		addr, single, ok := matchAddr(value)
		if !ok {
			return unreadable()
		}
		if equal && single && words[1] == "saddr" {
			r.Saddr = addr
		} else if equal && single {
			r.Daddr = addr
		}
	case dportProtocols[words[0]]:
		port, err := strconv.ParseUint(value, 10, 16)
		if err != nil {
			return unreadable()
		}
		if equal && words[1] == "dport" {
			r.DPort = uint16(port)
			if words[0] != "th" {
				r.L4Proto = words[0]
			}
		}
	}
	return from + op + 1, nil
}

// operator reads an optional == or != before a value: how many words the
// operator took (0 or 1), and the value ("" for none).
func operator(words []string) (int, string) {
	if len(words) > 0 && (words[0] == "==" || words[0] == "!=") {
		words = words[1:]
		if len(words) == 0 {
			return 1, ""
		}
		return 1, words[0]
	}
	if len(words) == 0 {
		return 0, ""
	}
	return 0, words[0]
}

// matchAddr reads an address or a prefix; single says it names one
// address, as nft lists a /32 or /128.
func matchAddr(v string) (addr netip.Addr, single, ok bool) {
	if p, err := netip.ParsePrefix(v); err == nil {
		return p.Addr().Unmap(), p.IsSingleIP(), true
	}
	a, err := netip.ParseAddr(v)
	return a.Unmap(), err == nil, err == nil
}

// dnatTarget reads `<addr>`, `<addr>:<port>` or `[<addr6>]:<port>`.
func dnatTarget(v string) (netip.Addr, uint16, bool) {
	if ap, err := netip.ParseAddrPort(v); err == nil {
		return ap.Addr().Unmap(), ap.Port(), true
	}
	a, err := netip.ParseAddr(strings.Trim(v, "[]"))
	return a.Unmap(), 0, err == nil
}
