package footprint

import (
	"errors"
	"net/netip"
	"strings"
)

// rule is one line of `iptables -S` output: "-A <chain> <spec…>". A GC
// sweep holds every rule of the host's nat and filter tables, so a rule
// keeps only substrings of its line (and a comment that had escapes).
type rule struct {
	line    string // as listed, for iptables-restore
	chain   string
	comment string // the value of --comment, if any
	target  string // the value of -j, if any
	source  string // the value of -s, if any
	pos     int    // its index among the rules of its chain, in the listing
}

// args returns the arguments after "-A <chain>", as Delete wants them,
// split from the line when asked for.
func (r rule) args() []string {
	fields, err := splitRuleLine(r.line)
	if err != nil || len(fields) < 2 {
		return nil
	}
	return fields[2:]
}

// parseRule parses an append line of `iptables -S`; ok is false for chain
// declarations (-N, -P) and for anything it cannot read.
func parseRule(line string) (r rule, ok bool) {
	n, key, bad := 0, "", false
	err := eachRuleField(line, func(field string) {
		switch n++; {
		case n == 1:
			bad = field != "-A"
		case n == 2:
			r.chain = field
		case key == "--comment":
			r.comment = field
		case key == "-j":
			r.target = field
		case key == "-s":
			r.source = field
		}
		if n > 2 {
			key = field
		}
	})
	if err != nil || bad || n < 2 || r.chain == "" {
		return rule{}, false
	}
	r.line = line
	return r, true
}

// splitRuleLine splits like iptables-save quotes: a value containing
// anything but [A-Za-z0-9_-] is wrapped in double quotes, with `"`, `\` and
// `'` escaped by a backslash. Fields without escapes are not copied.
func splitRuleLine(line string) ([]string, error) {
	if !strings.ContainsRune(line, '"') {
		return strings.Fields(line), nil // most rules: no comment, nothing quoted
	}
	fields := make([]string, 0, 16)
	err := eachRuleField(line, func(f string) { fields = append(fields, f) })
	return fields, err
}

// eachRuleField calls fn with each field of line, split as splitRuleLine
// does, without collecting them.
func eachRuleField(line string, fn func(string)) error {
	for i := 0; i < len(line); {
		switch line[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			i++
		case '"':
			field, next, err := quotedField(line, i+1)
			if err != nil {
				return err
			}
			fn(field)
			i = next
		default:
			j := i
			for j < len(line) && !isFieldSpace(line[j]) {
				j++
			}
			fn(line[i:j])
			i = j
		}
	}
	return nil
}

func isFieldSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// quotedField reads a quoted value starting after its opening quote and
// returns it unescaped with the index after the closing quote.
func quotedField(line string, start int) (field string, next int, err error) {
	var unescaped []byte // nil until the first backslash
	for j := start; j < len(line); j++ {
		switch c := line[j]; {
		case c == '"':
			if unescaped != nil {
				return string(unescaped), j + 1, nil
			}
			return line[start:j], j + 1, nil
		case c == '\\' && j+1 < len(line):
			if unescaped == nil {
				unescaped = append(make([]byte, 0, len(line)-start), line[start:j]...)
			}
			j++
			unescaped = append(unescaped, line[j])
		case unescaped != nil:
			unescaped = append(unescaped, c)
		}
	}
	return "", 0, errors.New("unterminated quote")
}

// tableListing is a parsed `iptables -S` listing of one chain or table.
// A sweep's listing of a whole table keeps the rules of the shared chains
// only (keep); of every other chain it keeps that it exists and its first
// rule's comment, which is all a sweep reads of the attachments' own
// chains (they go whole, flushed and deleted by name). At ten thousand
// attachments their rules are half of the table.
type tableListing struct {
	chains map[string][]rule    // every chain declared (-N, -P) or appended to, with its rules where kept
	heads  map[string]chainHead // chains whose rules are not kept
	keep   func(chain string) bool
}

// chainHead is what a sweep keeps of a chain whose rules it does not keep.
type chainHead struct {
	comment string // its first rule's comment
	ruled   bool   // it has a rule
}

func newTableListing(keep func(chain string) bool) *tableListing {
	return &tableListing{chains: map[string][]rule{}, heads: map[string]chainHead{}, keep: keep}
}

// parseListing parses lines, keeping the rules of the chains keep names
// (nil: of every chain).
func parseListing(lines []string, keep func(chain string) bool) *tableListing {
	l := newTableListing(keep)
	for _, line := range lines {
		l.add(line)
	}
	return l
}

// add reads one more line of the listing.
func (l *tableListing) add(line string) {
	if r, ok := parseRule(line); ok {
		if !l.kept(r.chain) {
			if !l.heads[r.chain].ruled {
				l.heads[r.chain] = chainHead{comment: strings.Clone(r.comment), ruled: true} // not the whole line
			}
			return
		}
		l.declare(r.chain)
		r.pos = len(l.chains[r.chain])
		l.chains[r.chain] = append(l.chains[r.chain], r)
		return
	}
	f := strings.Fields(line)
	switch {
	case len(f) < 2 || (f[0] != "-N" && f[0] != "-P"):
	case l.kept(f[1]):
		l.declare(f[1])
	default:
		if _, seen := l.heads[f[1]]; !seen {
			l.heads[f[1]] = chainHead{}
		}
	}
}

func (l *tableListing) kept(chain string) bool { return l.keep == nil || l.keep(chain) }

func (l *tableListing) declare(chain string) {
	if _, ok := l.chains[chain]; !ok {
		l.chains[chain] = nil
	}
}

// has reports whether chain exists, and whether its rules were kept.
func (l *tableListing) has(chain string) (exists, rulesKept bool) {
	if _, ok := l.chains[chain]; ok {
		return true, true
	}
	_, ok := l.heads[chain]
	return ok, false
}

// eachHead calls fn with every chain and its first rule's comment ("" for
// none, or an empty chain).
func (l *tableListing) eachHead(fn func(chain, comment string)) {
	for chain, rules := range l.chains {
		comment := ""
		if len(rules) > 0 {
			comment = rules[0].comment
		}
		fn(chain, comment)
	}
	for chain, head := range l.heads {
		fn(chain, head.comment)
	}
}

// hostAddr parses "<ip>/32", "<ip>/128" or a bare IP; ok is false for
// anything wider than one address.
func hostAddr(s string) (netip.Addr, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), p.IsSingleIP()
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err == nil
}

// maxStoredComment is what iptables keeps of a comment; it cuts longer
// ones silently.
const maxStoredComment = 255

// storedComment is a comment as iptables lists it.
func storedComment(c string) string {
	if len(c) > maxStoredComment {
		return c[:maxStoredComment]
	}
	return c
}

// ownsCommented reports whether r carries comment (as iptables stores it)
// and, when the stored comment was cut and so names the id only partly (a
// cut "id: \"ab" may stand for "ab" or "abc"), jumps to chain, which is
// derived from the whole id.
func ownsCommented(r rule, comment, chain string) bool {
	if r.comment != storedComment(comment) {
		return false
	}
	return len(comment) <= maxStoredComment || r.target == chain
}

// saveToListings turns iptables-save output into `iptables -S` lines per
// table: ":CHAIN POLICY [n:m]" becomes "-P CHAIN POLICY" for built-in
// chains and "-N CHAIN" for the others ("-" policy); rules stay as they are.
func saveToListings(save string) map[string][]string {
	tables := map[string][]string{}
	table := ""
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimPrefix(line, "*")
			tables[table] = nil
		case strings.HasPrefix(line, ":") && table != "":
			f := strings.Fields(strings.TrimPrefix(line, ":"))
			if len(f) >= 2 && f[1] != "-" {
				tables[table] = append(tables[table], "-P "+f[0]+" "+f[1])
			} else if len(f) >= 1 {
				tables[table] = append(tables[table], "-N "+f[0])
			}
		case strings.HasPrefix(line, "-A ") && table != "":
			tables[table] = append(tables[table], line)
		}
	}
	return tables
}
