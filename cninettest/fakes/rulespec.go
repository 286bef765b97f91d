package fakes

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// The fake holds a rule as the line `iptables -S` prints for it, so that
// a rule written by the plugins' words and one listed back compare
// equal. iptables prints a rule in an order of its own, whatever order
// it was given in: the addresses (-s, -d), the interfaces (-i, -o) and
// the protocol (-p), each with its "!"; then the matches in the order
// they came, an option of the protocol's own match (--dport after -p tcp)
// bringing it in as "-m tcp"; then the target and its options. A lone
// address is printed as a prefix (/32, /128), a prefix masked.

var plain = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// FormatRule renders a rule specification as iptables -S does (see the
// head of this file): in iptables' order, addresses as prefixes, the
// comment value quoted (with ", \ and ' escaped) unless it is plain, the
// other values as they are. A specification already in that form comes
// back as it was.
func FormatRule(spec []string) string {
	spec = inPrintOrder(spec)
	out := make([]string, len(spec))
	for i, s := range spec {
		if i > 0 && spec[i-1] == "--comment" && !plain.MatchString(s) {
			s = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `'`, `\'`).Replace(s) + `"`
		}
		out[i] = s
	}
	return strings.Join(out, " ")
}

// basicOptions are the options iptables prints first, in this order.
var basicOptions = []string{"-s", "-d", "-i", "-o", "-p"}

// inPrintOrder reorders spec as iptables prints a rule.
func inPrintOrder(spec []string) []string {
	basic := map[string][]string{}
	var groups [][]string // the matches, then the target, each with its options
	target := -1          // the target's index in groups
	cur := -1             // the group an option belongs to
	proto := ""
	negate := false
	for i := 0; i < len(spec); i++ {
		opt := spec[i]
		value := func() string {
			if i+1 < len(spec) {
				i++
				return spec[i]
			}
			return ""
		}
		bang := []string(nil)
		if negate {
			bang, negate = []string{"!"}, false
		}
		switch {
		case opt == "!":
			negate = true
		case isBasic(opt):
			v := value()
			if opt == "-s" || opt == "-d" {
				v = asPrefix(v)
			}
			if opt == "-p" {
				proto = v
			}
			basic[opt] = append(bang, opt, v)
			cur = -1
		case opt == "-m" || opt == "-j":
			groups = append(groups, append(bang, opt, value()))
			cur = len(groups) - 1
			if opt == "-j" {
				target = cur
			}
		default:
			if short, ok := multiportOptions[opt]; ok { // multiport's, wherever -p came
				for g := range groups {
					if slices.Equal(groups[g][:min(2, len(groups[g]))], []string{"-m", "multiport"}) {
						cur, opt = g, short
					}
				}
			}
			if cur < 0 && proto != "" { // an option of the protocol's match
				groups = append(groups, []string{"-m", proto})
				cur = len(groups) - 1
			}
			if cur < 0 {
				groups = append(groups, nil)
				cur = len(groups) - 1
			}
			groups[cur] = append(groups[cur], bang...)
			groups[cur] = append(groups[cur], opt)
			if i+1 < len(spec) && (opt == "--comment" || !strings.HasPrefix(spec[i+1], "-") && spec[i+1] != "!") {
				groups[cur] = append(groups[cur], value())
			}
		}
	}
	out := make([]string, 0, len(spec)+4)
	for _, opt := range basicOptions {
		out = append(out, basic[opt]...)
	}
	for i, g := range groups {
		if i != target {
			out = append(out, g...)
		}
	}
	if target >= 0 {
		out = append(out, groups[target]...)
	}
	return out
}

// multiportOptions are the multiport match's options, by the name
// iptables prints.
var multiportOptions = map[string]string{
	"--dports": "--dports", "--destination-ports": "--dports", "--sports": "--sports", "--source-ports": "--sports", "--ports": "--ports",
}

func isBasic(opt string) bool {
	for _, b := range basicOptions {
		if opt == b {
			return true
		}
	}
	return false
}

// asPrefix is an address as iptables prints it: a prefix, masked; a
// value that is neither address nor prefix as it is.
func asPrefix(v string) string {
	if a, err := netip.ParseAddr(v); err == nil {
		return netip.PrefixFrom(a, a.BitLen()).String()
	}
	if p, err := netip.ParsePrefix(v); err == nil {
		return p.Masked().String()
	}
	return v
}
