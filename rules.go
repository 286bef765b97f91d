package cninet

import (
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// unquote reads a Go-quoted string, as the bridge plugin's %q writes ids.
var unquote = strconv.Unquote

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
	declare := func(chain string) {
		if _, ok := l.chains[chain]; !ok {
			l.chains[chain] = nil
			l.order = append(l.order, chain)
		}
	}
	for _, line := range lines {
		if r, ok := parseRule(line); ok {
			declare(r.chain)
			l.chains[r.chain] = append(l.chains[r.chain], r)
			continue
		}
		if f := strings.Fields(line); len(f) >= 2 && (f[0] == "-N" || f[0] == "-P") {
			declare(f[1])
		}
	}
	return l
}

// owner identifies one attachment: the CNI network and the container id.
// The plugins derive every per-attachment name from these two strings.
type owner struct {
	network, id string
}

// maxChainLength is the longest chain name iptables accepts, and the
// length of every chain name the plugins derive.
const maxChainLength = 28

// chainName is the plugins' per-attachment chain name: prefix followed by
// the hex SHA-512 of network+id, cut to 28 characters.
func (o owner) chainName(prefix string) string {
	sum := sha512.Sum512([]byte(o.network + o.id))
	return (prefix + hex.EncodeToString(sum[:]))[:maxChainLength]
}

// masqChain is the bridge plugin's per-attachment nat chain, CNI-<h[:24]>.
func (o owner) masqChain() string { return o.chainName("CNI-") }

// dnatChain is portmap's per-attachment nat chain, CNI-DN-<h[:21]>.
func (o owner) dnatChain() string { return o.chainName("CNI-DN-") }

// snatChain is the per-attachment chain of portmap versions before 0.7.
func (o owner) snatChain() string { return o.chainName("CNI-SN-") }

// masqComment is the bridge plugin's comment, formatted with %q exactly as
// the plugin does.
func (o owner) masqComment() string { return fmt.Sprintf("name: %q id: %q", o.network, o.id) }

// maxPortmapComment is where portmap cuts its comments (to 253 + "...").
const maxPortmapComment = 255

// dnatComment is portmap's comment, formatted (with %s, not %q) and cut
// exactly as the plugin does.
func (o owner) dnatComment() string {
	c := fmt.Sprintf(`dnat name: "%s" id: "%s"`, o.network, o.id)
	if len(c) > maxPortmapComment {
		c = c[:maxPortmapComment-2] + "..."
	}
	return c
}

// maxStoredComment is what iptables keeps of a comment; it cuts longer
// ones silently (so portmap's 256-byte "..." comments end in "..").
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
	stored := storedComment(comment)
	if r.comment != stored {
		return false
	}
	return len(comment) <= maxStoredComment || r.target == chain
}

// ownsMasqJump reports whether r is this attachment's POSTROUTING jump.
func (o owner) ownsMasqJump(r rule) bool {
	return r.chain == "POSTROUTING" && ownsCommented(r, o.masqComment(), o.masqChain())
}

// ownsDNATJump reports whether r is this attachment's CNI-HOSTPORT-DNAT
// jump.
func (o owner) ownsDNATJump(r rule) bool {
	return r.chain == hostportDNATChain && ownsCommented(r, o.dnatComment(), o.dnatChain())
}

const (
	hostportDNATChain = "CNI-HOSTPORT-DNAT"
	firewallChain     = "CNI-FORWARD"
)

// firewallRuleAddr returns the address of a rule exactly as the firewall
// plugin writes it for one workload address (and nothing else):
//
//	-d <ip>/<full> -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//	-s <ip>/<full> -j ACCEPT
func firewallRuleAddr(r rule) (netip.Addr, bool) {
	if r.chain != firewallChain {
		return netip.Addr{}, false
	}
	var prefix string
	switch s := r.spec; {
	case len(s) == 8 && s[0] == "-d" && s[2] == "-m" && s[3] == "conntrack" && s[4] == "--ctstate" &&
		s[5] == "RELATED,ESTABLISHED" && s[6] == "-j" && s[7] == "ACCEPT":
		prefix = s[1]
	case len(s) == 4 && s[0] == "-s" && s[2] == "-j" && s[3] == "ACCEPT":
		prefix = s[1]
	default:
		return netip.Addr{}, false
	}
	return hostAddr(prefix)
}

// hostAddr parses "<ip>/32", "<ip>/128" or a bare IP.
func hostAddr(s string) (netip.Addr, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), p.IsSingleIP()
	}
	a, err := netip.ParseAddr(s)
	return a.Unmap(), err == nil
}

// isCNIComment reports whether a comment has the shape the bridge plugin
// gives every attachment's rules.
func isCNIComment(c string) bool {
	return strings.HasPrefix(c, "name: ") && strings.Contains(c, " id: ")
}
