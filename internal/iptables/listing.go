package iptables

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
)

// Rule is one line of `iptables -S` output: "-A <chain> <spec…>". A GC
// sweep holds every Rule of the host's nat and filter tables, so a Rule
// keeps only substrings of its line (and a comment that had escapes).
type Rule struct {
	Line    string // as listed, for iptables-restore
	Chain   string
	Comment string // the value of --comment, if any
	Pos     int32  // its index among the rules of its chain, in the listing
	// where in line the values of -j and -s are, if any (never quoted)
	targetAt, sourceAt span
}

// span is where a field is in a line; a sweep holds tens of thousands of
// rules, so a rule keeps spans rather than strings.
type span struct{ at, n uint16 }

func (r Rule) Target() string { return r.Line[r.targetAt.at:][:r.targetAt.n] }
func (r Rule) Source() string { return r.Line[r.sourceAt.at:][:r.sourceAt.n] }

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

// Args returns the arguments after "-A <chain>", as Delete wants them,
// split from the line when asked for.
func (r Rule) Args() []string {
	fields, err := SplitRuleLine(r.Line)
	if err != nil || len(fields) < 2 {
		return nil
	}
	return fields[2:]
}

// ParseRule parses an append line of `iptables -S`; ok is false for chain
// declarations (-N, -P) and for anything it cannot read.
func ParseRule(line string) (r Rule, ok bool) {
	if len(line) > maxRuleLine {
		return Rule{}, false
	}
	n, key, bad := 0, "", false
	err := eachRuleField(line, func(field string, at int) {
		switch n++; {
		case n == 1:
			bad = field != "-A"
		case n == 2:
			r.Chain = field
		case key == "--comment":
			r.Comment = field
		case key == "-j":
			r.targetAt = fieldSpan(field, at)
		case key == "-s":
			r.sourceAt = fieldSpan(field, at)
		}
		if n > 2 {
			key = field
		}
	})
	if err != nil || bad || n < 2 || r.Chain == "" {
		return Rule{}, false
	}
	r.Line = line
	return r, true
}

// SplitRuleLine splits like iptables-save quotes: a value containing
// anything but [A-Za-z0-9_-] is wrapped in double quotes, with `"`, `\` and
// `'` escaped by a backslash. Fields without escapes are not copied.
func SplitRuleLine(line string) ([]string, error) {
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

// Listing is a parsed `iptables -S` listing of one chain or table.
// A sweep's listing of a whole table keeps the rules of the shared chains
// only (keep); of every other chain it keeps that it exists and its first
// rule's comment, which is all a sweep reads of the attachments' own
// chains (they go whole, flushed and deleted by name). At ten thousand
// attachments their rules are half of the table.
type Listing struct {
	Chains map[string][]Rule    // every chain declared (-N, -P) or appended to, with its rules where kept
	heads  map[string]chainHead // chains whose rules are not kept
	Keep   map[string]bool      // nil: every chain's rules
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

func NewListing(keep map[string]bool) *Listing {
	return &Listing{Chains: map[string][]Rule{}, heads: map[string]chainHead{}, Keep: keep}
}

// ParseListing parses lines, keeping the rules of the chains keep names
// (nil: of every chain).
func ParseListing(lines []string, keep map[string]bool) *Listing {
	l := NewListing(keep)
	for _, line := range lines {
		l.Add([]byte(line))
	}
	return l
}

// Add reads one more line of the listing. line is not kept: what is kept
// of it is copied, and nothing of a line whose chain is not kept but for
// the chain's name and first comment.
func (l *Listing) Add(line []byte) {
	verb, chain, _ := cutField(line)
	switch {
	case len(chain) == 0:
	case string(verb) == "-A" && l.kept(chain):
		l.addRule(l.lines.keep(line))
	case string(verb) == "-A":
		if l.heads[string(chain)].ruled {
			return
		}
		if r, ok := ParseRule(string(line)); ok {
			l.heads[l.names.keep(chain)] = chainHead{comment: l.names.keepString(r.Comment), ruled: true}
		}
	case string(verb) != "-N" && string(verb) != "-P":
	case l.kept(chain):
		if _, ok := l.Chains[string(chain)]; !ok {
			l.Chains[l.comments.keep(chain)] = nil
		}
	default:
		if _, seen := l.heads[string(chain)]; !seen {
			l.heads[l.names.keep(chain)] = chainHead{}
		}
	}
}

// addRule adds a rule of a kept chain; line is already in l.lines.
func (l *Listing) addRule(line string) {
	r, ok := ParseRule(line)
	if !ok {
		return
	}
	if i := strings.Index(line, r.Comment); i >= 0 {
		r.Comment = line[i : i+len(r.Comment)]
	} else {
		r.Comment = l.comments.keepString(r.Comment) // unescaped: not in the line as listed
	}
	if _, ok := l.Chains[r.Chain]; !ok {
		l.Chains[r.Chain] = nil
	}
	r.Pos = int32(len(l.Chains[r.Chain]))
	l.Chains[r.Chain] = append(l.Chains[r.Chain], r)
}

// cutField returns the first two fields of line and the rest.
func cutField(line []byte) (first, second, rest []byte) {
	first, rest, _ = bytes.Cut(bytes.TrimLeft(line, " "), []byte(" "))
	second, rest, _ = bytes.Cut(bytes.TrimLeft(rest, " "), []byte(" "))
	return first, bytes.TrimSpace(second), rest
}

func (l *Listing) kept(chain []byte) bool { return l.Keep == nil || l.Keep[string(chain)] }

// textArena keeps strings in shared blocks: a sweep keeps tens of
// thousands of rule lines and chain names, which one allocation each
// would scatter among the lines it reads and drops.
type textArena struct{ block strings.Builder }

// Blocks start at firstArenaBlock and double up to arenaBlock: a
// Teardown's listing of one attachment's chains keeps a few lines, a
// sweep's tens of thousands.
const (
	firstArenaBlock = 1 << 10
	arenaBlock      = 64 << 10
)

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
		size := max(min(2*a.block.Cap(), arenaBlock), firstArenaBlock, n)
		a.block = strings.Builder{}
		a.block.Grow(size)
	}
	return a.block.Len()
}

// DropHeads lets go of what the listing keeps of the chains whose rules
// it does not keep: once a sweep has planned, only the kept rules are
// read.
func (l *Listing) DropHeads() {
	l.heads, l.names = nil, textArena{}
}

// Has reports whether chain exists, and whether its rules were kept.
func (l *Listing) Has(chain string) (exists, rulesKept bool) {
	if _, ok := l.Chains[chain]; ok {
		return true, true
	}
	_, ok := l.heads[chain]
	return ok, false
}

// SweepsNothing reports whether a sweep could remove nothing the listing
// holds: no rule of a kept chain, no chain that ownChain says an
// attachment could own.
func (l *Listing) SweepsNothing(ownChain func(chain string) bool) bool {
	for _, rules := range l.Chains {
		if len(rules) > 0 {
			return false
		}
	}
	for chain := range l.heads {
		if ownChain(chain) {
			return false
		}
	}
	return true
}

// EachHead calls fn with every chain and its first rule's comment ("" for
// none, or an empty chain).
func (l *Listing) EachHead(fn func(chain, comment string)) {
	for chain, rules := range l.Chains {
		comment := ""
		if len(rules) > 0 {
			comment = rules[0].Comment
		}
		fn(chain, comment)
	}
	for chain, head := range l.heads {
		fn(chain, head.comment)
	}
}

// HostAddr parses "<ip>/32", "<ip>/128" or a bare IP; ok is false for
// anything wider than one address.
func HostAddr(s string) (netip.Addr, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), p.IsSingleIP()
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err == nil
}

// maxStoredComment is what iptables keeps of a comment; it cuts longer
// ones silently.
const maxStoredComment = 255

// StoredComment is a comment as iptables lists it.
func StoredComment(c string) string {
	if len(c) > maxStoredComment {
		return c[:maxStoredComment]
	}
	return c
}

// OwnsCommented reports whether r carries comment (as iptables stores it)
// and, when the stored comment was cut and so names the id only partly (a
// cut "id: \"ab" may stand for "ab" or "abc"), jumps to chain, which is
// derived from the whole id.
func OwnsCommented(r Rule, comment, chain string) bool {
	if r.Comment != StoredComment(comment) {
		return false
	}
	return len(comment) <= maxStoredComment || r.Target() == chain
}

// SaveToListings turns iptables-save output into `iptables -S` lines per
// table: ":CHAIN POLICY [n:m]" becomes "-P CHAIN POLICY" for built-in
// chains and "-N CHAIN" for the others ("-" policy); rules stay as they are.
func SaveToListings(save string) map[string][]string {
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
