package footprint

import (
	"errors"
	"net/netip"
	"strings"
)

// rule is one line of `iptables -S` output: "-A <chain> <spec…>".
type rule struct {
	line    string // as listed, for iptables-restore
	chain   string
	spec    []string // the arguments after "-A <chain>", as Delete wants them
	comment string   // the value of --comment, if any
	target  string   // the value of -j, if any
	source  string   // the value of -s, if any
}

// parseRule parses an append line of `iptables -S`; ok is false for chain
// declarations (-N, -P) and for anything it cannot read.
func parseRule(line string) (r rule, ok bool) {
	fields, err := splitRuleLine(line)
	if err != nil || len(fields) < 2 || fields[0] != "-A" || fields[1] == "" {
		return rule{}, false
	}
	r = rule{line: line, chain: fields[1], spec: fields[2:]}
	for i := 0; i+1 < len(r.spec); i++ {
		switch r.spec[i] {
		case "--comment":
			r.comment = r.spec[i+1]
		case "-j":
			r.target = r.spec[i+1]
		case "-s":
			r.source = r.spec[i+1]
		}
	}
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
	for i := 0; i < len(line); {
		switch line[i] {
		case ' ', '\t':
			i++
		case '"':
			field, next, err := quotedField(line, i+1)
			if err != nil {
				return nil, err
			}
			fields = append(fields, field)
			i = next
		default:
			j := i
			for j < len(line) && line[j] != ' ' && line[j] != '\t' {
				j++
			}
			fields = append(fields, line[i:j])
			i = j
		}
	}
	return fields, nil
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
type tableListing struct {
	chains map[string][]rule // every chain declared (-N, -P) or appended to
	order  []string          // chain names in listing order
}

func parseListing(lines []string) *tableListing {
	l := &tableListing{chains: map[string][]rule{}}
	for _, line := range lines {
		l.add(line)
	}
	return l
}

// add reads one more line of the listing.
func (l *tableListing) add(line string) {
	if r, ok := parseRule(line); ok {
		l.declare(r.chain)
		l.chains[r.chain] = append(l.chains[r.chain], r)
		return
	}
	if f := strings.Fields(line); len(f) >= 2 && (f[0] == "-N" || f[0] == "-P") {
		l.declare(f[1])
	}
}

func (l *tableListing) declare(chain string) {
	if _, ok := l.chains[chain]; !ok {
		l.chains[chain] = nil
		l.order = append(l.order, chain)
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
