package footprint

import (
	"bytes"
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
	pos     int32  // its index among the rules of its chain, in the listing
	// where in line the values of -j and -s are, if any (never quoted)
	targetAt, sourceAt span
}

// span is where a field is in a line; a sweep holds tens of thousands of
// rules, so a rule keeps spans rather than strings.
type span struct{ at, n uint16 }

func (r rule) target() string { return r.line[r.targetAt.at:][:r.targetAt.n] }
func (r rule) source() string { return r.line[r.sourceAt.at:][:r.sourceAt.n] }

// fieldSpan is where a field is, or an empty span for a quoted one (never
// written so by iptables for -j or -s: such a rule is attributed to
// nobody by it).
func fieldSpan(field string, at int) span {
	if at < 0 {
		return span{}
	}
	return span{uint16(at), uint16(len(field))}
}

// maxRuleLine is the longest line a rule's spans can point into, far
// beyond what iptables writes (a comment has 255 bytes at most).
const maxRuleLine = 1<<16 - 1

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
	if len(line) > maxRuleLine {
		return rule{}, false
	}
	n, key, bad := 0, "", false
	err := eachRuleField(line, func(field string, at int) {
		switch n++; {
		case n == 1:
			bad = field != "-A"
		case n == 2:
			r.chain = field
		case key == "--comment":
			r.comment = field
		case key == "-j":
			r.targetAt = fieldSpan(field, at)
		case key == "-s":
			r.sourceAt = fieldSpan(field, at)
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
	err := eachRuleField(line, func(f string, _ int) { fields = append(fields, f) })
	return fields, err
}

// eachRuleField calls fn with each field of line, split as splitRuleLine
// does, without collecting them, and where in line it is (-1 for a quoted
// one).
func eachRuleField(line string, fn func(field string, at int)) error {
	for i := 0; i < len(line); {
		switch line[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			i++
		case '"':
			field, next, err := quotedField(line, i+1)
			if err != nil {
				return err
			}
			fn(field, -1)
			i = next
		default:
			j := i
			for j < len(line) && !isFieldSpace(line[j]) {
				j++
			}
			fn(line[i:j], i)
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
	keep   map[string]bool      // nil: every chain's rules
	// lines holds the kept rules' lines, which a report keeps; comments
	// their comments unescaped; names the other chains' names and first
	// comments, which a sweep lets go of once it has planned (dropHeads).
	lines, comments, names textArena
}

// chainHead is what a sweep keeps of a chain whose rules it does not keep.
type chainHead struct {
	comment string // its first rule's comment
	ruled   bool   // it has a rule
}

func newTableListing(keep map[string]bool) *tableListing {
	return &tableListing{chains: map[string][]rule{}, heads: map[string]chainHead{}, keep: keep}
}

// parseListing parses lines, keeping the rules of the chains keep names
// (nil: of every chain).
func parseListing(lines []string, keep map[string]bool) *tableListing {
	l := newTableListing(keep)
	for _, line := range lines {
		l.add([]byte(line))
	}
	return l
}

// add reads one more line of the listing. line is not kept: what is kept
// of it is copied, and nothing of a line whose chain is not kept but for
// the chain's name and first comment.
func (l *tableListing) add(line []byte) {
	verb, chain, _ := cutField(line)
	switch {
	case len(chain) == 0:
	case string(verb) == "-A" && l.kept(chain):
		l.addRule(l.lines.keep(line))
	case string(verb) == "-A":
		if l.heads[string(chain)].ruled {
			return
		}
		if r, ok := parseRule(string(line)); ok {
			l.heads[l.names.keep(chain)] = chainHead{comment: l.names.keepString(r.comment), ruled: true}
		}
	case string(verb) != "-N" && string(verb) != "-P":
	case l.kept(chain):
		if _, ok := l.chains[string(chain)]; !ok {
			l.chains[l.comments.keep(chain)] = nil
		}
	default:
		if _, seen := l.heads[string(chain)]; !seen {
			l.heads[l.names.keep(chain)] = chainHead{}
		}
	}
}

// addRule adds a rule of a kept chain; line is already in l.lines.
func (l *tableListing) addRule(line string) {
	r, ok := parseRule(line)
	if !ok {
		return
	}
	if i := strings.Index(line, r.comment); i >= 0 {
		r.comment = line[i : i+len(r.comment)]
	} else {
		r.comment = l.comments.keepString(r.comment) // unescaped: not in the line as listed
	}
	if _, ok := l.chains[r.chain]; !ok {
		l.chains[r.chain] = nil
	}
	r.pos = int32(len(l.chains[r.chain]))
	l.chains[r.chain] = append(l.chains[r.chain], r)
}

// cutField returns the first two fields of line and the rest.
func cutField(line []byte) (first, second, rest []byte) {
	first, rest, _ = bytes.Cut(bytes.TrimLeft(line, " "), []byte(" "))
	second, rest, _ = bytes.Cut(bytes.TrimLeft(rest, " "), []byte(" "))
	return first, bytes.TrimSpace(second), rest
}

func (l *tableListing) kept(chain []byte) bool { return l.keep == nil || l.keep[string(chain)] }

// textArena keeps strings in shared blocks: a sweep keeps tens of
// thousands of rule lines and chain names, which one allocation each
// would scatter among the lines it reads and drops.
type textArena struct{ block strings.Builder }

const arenaBlock = 64 << 10

// keep returns a copy of b in the arena. A block is never written where
// it was written before, so the strings handed out stay as they were.
func (a *textArena) keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	start := a.room(len(b))
	a.block.Write(b)
	return a.block.String()[start:]
}

func (a *textArena) keepString(s string) string {
	if len(s) == 0 {
		return ""
	}
	start := a.room(len(s))
	a.block.WriteString(s)
	return a.block.String()[start:]
}

// room starts a new block unless n more bytes fit, and returns where
// they go.
func (a *textArena) room(n int) int {
	if a.block.Cap()-a.block.Len() < n {
		a.block = strings.Builder{}
		a.block.Grow(max(arenaBlock, n))
	}
	return a.block.Len()
}

// dropHeads lets go of what the listing keeps of the chains whose rules
// it does not keep: once a sweep has planned, only the kept rules are
// read.
func (l *tableListing) dropHeads() {
	l.heads, l.names = nil, textArena{}
}

// has reports whether chain exists, and whether its rules were kept.
func (l *tableListing) has(chain string) (exists, rulesKept bool) {
	if _, ok := l.chains[chain]; ok {
		return true, true
	}
	_, ok := l.heads[chain]
	return ok, false
}

// sweepsNothing reports whether a sweep could remove nothing the listing
// holds: no rule of a kept chain, no chain named as an attachment's.
func (l *tableListing) sweepsNothing() bool {
	for _, rules := range l.chains {
		if len(rules) > 0 {
			return false
		}
	}
	for chain := range l.heads {
		if isAttachmentChain(chain) {
			return false
		}
	}
	return true
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
	return len(comment) <= maxStoredComment || r.target() == chain
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
