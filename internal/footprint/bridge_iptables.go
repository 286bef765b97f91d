package footprint

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/seed1280861d/cninet/internal/iptables"
)

// The bridge plugin's ipMasq with the iptables backend (and ptp's) writes,
// per attachment and family, in table nat:
//
//	-A POSTROUTING -s <ip>/<full> -m comment --comment "name: \"N\" id: \"ID\"" -j CNI-<h[:24]>
//	-N CNI-<h[:24]>   (ACCEPT for the subnet, MASQUERADE for the rest, same comment)
//
// where h = hex(sha512(N+ID)). Its DEL skips all of it when the namespace
// is already gone. The jump's source address proves the attachment held
// it; another attachment's jump naming an address proves that one holds it.

type bridgeIPT struct{}

const (
	postrouting     = "POSTROUTING"
	masqChainPrefix = "CNI-"
)

// MasqChain is the bridge plugin's per-attachment nat chain, CNI-<h[:24]>
// (FormatChainName in the plugins' pkg/utils).
func (a Attachment) MasqChain() string { return a.chainName(masqChainPrefix) }

// The views read POSTROUTING for the masquerade jumps, rule by rule, in
// every run and in a drift check (iptReader).
func (bridgeIPT) sharedChains() []tableChain  { return []tableChain{{"nat", postrouting}} }
func (bridgeIPT) checkedChains() []tableChain { return []tableChain{{"nat", postrouting}} }
func (bridgeIPT) chainPrefixes() []string     { return []string{masqChainPrefix} }
func (bridgeIPT) perFamily()                  {}

// MasqComment is the bridge plugin's comment, formatted with %q exactly as
// the plugin does (FormatComment in the plugins' pkg/utils).
func (a Attachment) MasqComment() string { return fmt.Sprintf("name: %q id: %q", a.Network, a.ID) }

// ownsMasqJump reports whether r is this attachment's POSTROUTING jump.
func (a Attachment) ownsMasqJump(r iptables.Rule) bool {
	return r.Chain == postrouting && iptables.OwnsCommented(r, a.MasqComment(), a.MasqChain())
}

func (bridgeIPT) prove(v *view, set attSet) []claim {
	var out []claim
	for _, f := range v.families() {
		for _, j := range masqJumps(v, f, set) {
			if addr, ok := iptables.HostAddr(j.rule.Source()); ok {
				out = append(out, claim{addr, j.att})
			}
		}
	}
	return out
}

// holders reads POSTROUTING where a rule that is not the set's own may
// name one of addrs.
func (bridgeIPT) holders(v *view, set attSet, addrs addrSet) []claim {
	addrs = contested(v, set, addrs)
	var out []claim
	for _, f := range v.families() {
		mine := addrs.list(f.v6)
		if !f.mayMention("nat", postrouting, mine, chainsOf(set, Attachment.MasqChain)) {
			continue
		}
		own := commentIndex(set, Attachment.MasqComment)
		rules, _ := f.rules("nat", postrouting)
		for _, r := range rules {
			addr, ok := iptables.HostAddr(r.Source())
			if !ok || !isMasqComment(r.Comment) || !addrs[addr] || ownerIn(r, own[r.Comment], Attachment.ownsMasqJump) != nil {
				continue
			}
			holder, _ := parseMasqComment(r.Comment) // a cut comment names nobody for sure: held all the same
			out = append(out, claim{addr, holder})
		}
	}
	return out
}

func (bridgeIPT) plan(v *view, set attSet, _ *evidence, p *plan) {
	for _, f := range v.families() {
		jumps := masqJumps(v, f, set)
		p.growIPT(f.v6, len(jumps)+len(set))
		for _, j := range jumps {
			p.deleteRule(f.v6, j.att, "nat", j.rule)
		}
		for _, a := range set.sorted() {
			if f.hasChain("nat", a.MasqChain()) {
				p.deleteChain(f.v6, a, "nat", a.MasqChain())
			}
		}
	}
}

// discover finds the jumps of known networks, and masquerade chains whose
// jump is already gone (by the comment their rules carry).
func (bridgeIPT) discover(v *view, found attSet) {
	for _, f := range v.families() {
		rules, _ := f.rules("nat", postrouting)
		for _, r := range rules {
			if a, ok := parseMasqComment(r.Comment); ok && v.known(a) {
				found[a] = true
			}
		}
		f.listing("nat", postrouting).EachHead(func(chain, comment string) {
			if !strings.HasPrefix(chain, "CNI-") {
				return
			}
			if a, ok := parseMasqComment(comment); ok && v.known(a) && a.MasqChain() == chain {
				found[a] = true
			}
		})
	}
}

// ownedRule is a rule and the attachment of the set it belongs to.
type ownedRule struct {
	att  Attachment
	rule *iptables.Rule
}

// masqJumps returns the set's POSTROUTING jumps in family f. A Teardown
// lists POSTROUTING only when one of the set's masquerade chains exists:
// a jump needs its target.
func masqJumps(v *view, f *iptView, set attSet) []ownedRule {
	if !v.whole && !f.anyChain("nat", chainsOf(set, Attachment.MasqChain)) {
		return nil
	}
	own := commentIndex(set, Attachment.MasqComment)
	rules, _ := f.rules("nat", postrouting)
	var out []ownedRule
	for i := range rules {
		if a := ownerIn(rules[i], own[rules[i].Comment], Attachment.ownsMasqJump); a != nil {
			out = append(out, ownedRule{*a, &rules[i]})
		}
	}
	return out
}

// parseMasqComment returns the attachment a bridge plugin comment names,
// when the comment is exactly the plugin's (uncut) comment for it.
func parseMasqComment(comment string) (Attachment, bool) {
	rest, ok := strings.CutPrefix(comment, "name: ")
	if !ok {
		return Attachment{}, false
	}
	network, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return Attachment{}, false
	}
	id, err := strconv.Unquote(strings.TrimPrefix(rest[len(network):], " id: "))
	network, _ = strconv.Unquote(network)
	a := Attachment{network, id}
	if err != nil || !IsContainerID(id) || a.MasqComment() != comment {
		return Attachment{}, false
	}
	return a, true
}

// isMasqComment reports whether a comment has the shape the bridge plugin
// gives every attachment's rules, of any network.
func isMasqComment(c string) bool {
	return strings.HasPrefix(c, "name: ") && strings.Contains(c, " id: ")
}

// masqPlugin returns the network's bridge or ptp plugin that masquerades
// (ipMasq) and the backend it used.
func masqPlugin(a *Live) (typ, backend string, ok bool) {
	type masqConf struct {
		IPMasq bool `json:"ipMasq"`
	}
	for _, t := range []string{"bridge", "ptp"} {
		for _, conf := range configs[masqConf](a.Net, t) {
			if conf.IPMasq {
				return t, orDefault(a.backend(t), "iptables"), true
			}
		}
	}
	return "", "", false
}

// multicastNet is what the masquerade chain leaves alone, per family
// (pkg/ip's SetupIPMasq).
func multicastNet(v6 bool) string {
	if v6 {
		return "ff00::/8"
	}
	return "224.0.0.0/4"
}

// expect: for each of the result's addresses, the masquerade chain with
// its two rules and the POSTROUTING jump to it, as pkg/ip's SetupIPMasq
// writes them (the bridge plugin hands it every address of its result).
// cninet restores them itself, with the same commands (restore.go).
func (bridgeIPT) expect(v *liveView, a *Live, h *Health) {
	if v.firewallUnchanged {
		return // nothing to compare: skip building what is wanted
	}
	typ, backend, ok := masqPlugin(a)
	if !ok || backend != "iptables" {
		return
	}
	for _, v6 := range []bool{false, true} {
		addrs := a.addrs(v6)
		if len(addrs) == 0 {
			continue
		}
		expectChains(v, v6, typ, ByCninet, h, "nat", a.MasqChain())
		expectRules(v, v6, typ, ByCninet, h, masqRules(a.Attachment, addrs, v6)...)
	}
}

// masqRules are the rules SetupIPMasq writes for addrs, in its order.
func masqRules(a Attachment, addrs []netip.Prefix, v6 bool) []wantRule {
	chain, comment := a.MasqChain(), a.MasqComment()
	var out []wantRule
	for _, p := range addrs {
		out = append(out,
			rule("nat", chain, "accept to "+p.Masked().String(), "-d", p.String(), "-j", "ACCEPT", "-m", "comment", "--comment", comment).inOwnChain(),
			rule("nat", chain, "masquerade but to "+multicastNet(v6), "!", "-d", multicastNet(v6), "-j", "MASQUERADE", "-m", "comment", "--comment", comment).inOwnChain(),
			rule("nat", postrouting, "jump from "+p.Addr().String()+" to "+chain, "-s", p.Addr().String(), "-j", chain, "-m", "comment", "--comment", comment))
	}
	return out
}
