package footprint

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet/host"
)

// The bridge plugin's ipMasq with "ipMasqBackend": "nftables" (and ptp's)
// writes, per attachment and address, in table inet cni_plugins_masquerade,
// chain masq_checks:
//
//	ip[6] saddr <ip> ip[6] daddr != <subnet> masquerade comment "<H(N)>-<H(IF:ID)>, net: N, if: IF, id: ID"
//
// where H(s) is the first 16 hex digits of sha512(s), `"` is dropped from
// N, IF and ID, and the comment is cut to 128 bytes (nft's limit). The
// table, its postrouting base chain and masq_checks are shared and never
// deleted. Like the iptables backend, its DEL skips all of it when the
// namespace is already gone. A rule's saddr proves its attachment held
// the address, and that another attachment's rule holds it.

type bridgeNFT struct{}

var nftMasqTable = host.NFTable{Family: "inet", Name: "cni_plugins_masquerade"}

const (
	nftMasqChain      = "masq_checks"
	maxNFTComment     = 128 // knftables.CommentLengthMax
	nftMasqHashLength = 16
)

// nftHash is the plugin's short hash (MustFormatHashWithPrefix(16, "", s)
// in the plugins' pkg/utils).
func nftHash(s string) string {
	sum := sha512.Sum512([]byte(s))
	return hex.EncodeToString(sum[:])[:nftMasqHashLength]
}

// NFTMasqComment is the bridge plugin's nftables masquerade comment for
// the attachment's interface ifName, cut as the plugin cuts it. The
// hashes name network, interface and the whole id, so even a cut comment
// belongs to exactly one attachment.
func (a Attachment) NFTMasqComment(ifName string) string {
	drop := func(s string) string { return strings.ReplaceAll(s, `"`, "") }
	c := fmt.Sprintf("%s-%s, net: %s, if: %s, id: %s",
		nftHash(a.Network), nftHash(ifName+":"+a.ID), drop(a.Network), drop(ifName), drop(a.ID))
	if len(c) > maxNFTComment {
		c = c[:maxNFTComment]
	}
	return c
}

// The views list the masquerade table and read masq_checks (nftReader).
func (bridgeNFT) nftRead() ([]host.NFTable, []string) {
	return []host.NFTable{nftMasqTable}, []string{nftMasqChain}
}

// ownNFTRule: a masquerade rule with one of the set's comments.
func (bridgeNFT) ownNFTRule(v *view, set attSet) nftRuleTest {
	index := masqIndex(v, set)
	return func(table host.NFTable, chain, comment string) bool {
		_, own := index[comment]
		return own && table == nftMasqTable && chain == nftMasqChain
	}
}

// ownNFTComments: the set's masquerade comments, one per interface name
// its networks may give it.
func (bridgeNFT) ownNFTComments(v *view, set attSet) []string {
	return sortedKeys(masqIndex(v, set))
}

// otherNFTRule: any rule of the masquerade table without one of the
// set's comments.
func (bridgeNFT) otherNFTRule(v *view, set attSet) nftRuleTest {
	index := masqIndex(v, set)
	return func(table host.NFTable, _, comment string) bool {
		_, own := index[comment]
		return table == nftMasqTable && !own
	}
}

// isNFTMasq reports whether r is any attachment's masquerade rule.
func isNFTMasq(r host.NFTRule) bool {
	return r.Family == nftMasqTable.Family && r.Table == nftMasqTable.Name && r.Chain == nftMasqChain && r.Comment != ""
}

func (bridgeNFT) prove(v *view, set attSet) []claim {
	var out []claim
	for _, o := range ownMasqRules(v, set) {
		if o.rule.Saddr.IsValid() {
			out = append(out, claim{o.rule.Saddr, o.att})
		}
	}
	return out
}

func (bridgeNFT) holders(v *view, set attSet, addrs addrSet) []claim {
	addrs = contested(v, set, addrs)
	if len(addrs) == 0 || !othersMayMention(v, set, addrs.all()) || len(v.nft.list()) == 0 {
		return nil
	}
	index := masqIndex(v, set)
	var out []claim
	for _, r := range v.nft.list() {
		if _, own := index[r.Comment]; !own && isNFTMasq(r) && addrs[r.Saddr] {
			holder, _, _ := parseNFTMasqComment(r.Comment) // a cut comment names nobody for sure: held all the same
			out = append(out, claim{r.Saddr, holder})
		}
	}
	return out
}

func (bridgeNFT) plan(v *view, set attSet, _ *evidence, p *plan) {
	for _, o := range ownMasqRules(v, set) {
		p.deleteNFTRule(o.att, o.rule)
	}
}

func (bridgeNFT) discover(v *view, found attSet) {
	for _, r := range v.nft.list() {
		if a, ifName, ok := parseNFTMasqComment(r.Comment); ok && isNFTMasq(r) && v.known(a) &&
			slices.Contains(v.nets[a.Network].ifNames(), ifName) {
			found[a] = true
		}
	}
}

// ownedNFTRule is an nftables rule and the attachment of the set it
// belongs to.
type ownedNFTRule struct {
	att  Attachment
	rule *host.NFTRule // in the view's listing
}

// ownMasqRules returns the set's masquerade rules. A Teardown lists the
// tables only when a rule in the kernel carries one of its comments.
func ownMasqRules(v *view, set attSet) []ownedNFTRule {
	if !ownMayBeThere(v, set) {
		return nil
	}
	rules := v.nft.list()
	if len(rules) == 0 {
		return nil // no index of comments to build
	}
	index := masqIndex(v, set)
	var out []ownedNFTRule
	for i := range rules {
		if a, own := index[rules[i].Comment]; own && isNFTMasq(rules[i]) {
			out = append(out, ownedNFTRule{a, &rules[i]})
		}
	}
	return out
}

// masqIndex maps each of the set's masquerade comments, under every
// interface name its network's attachments may have, to its attachment.
func masqIndex(v *view, set attSet) map[string]Attachment {
	index := make(map[string]Attachment, len(set))
	for _, a := range set.sorted() {
		for _, ifName := range v.nets[a.Network].ifNames() {
			index[a.NFTMasqComment(ifName)] = a
		}
	}
	return index
}

// parseNFTMasqComment returns the attachment and interface an uncut
// masquerade comment names: its fields, checked by formatting the comment again (which also
// checks the hashes).
func parseNFTMasqComment(comment string) (Attachment, string, bool) {
	_, rest, ok := strings.Cut(comment, ", net: ")
	network, rest, ok2 := strings.Cut(rest, ", if: ")
	ifName, id, ok3 := strings.Cut(rest, ", id: ")
	a := Attachment{network, id}
	if !ok || !ok2 || !ok3 || !IsContainerID(id) || a.NFTMasqComment(ifName) != comment {
		return Attachment{}, "", false
	}
	return a, ifName, true
}

// expect: the table's postrouting chain going to masq_checks (after its
// two multicast returns), and in masq_checks one rule per address of the
// result, as pkg/ip's nftables SetupIPMasqForNetworks writes them. cninet
// restores them itself, in one transaction of the same commands
// (restore.go).
func (bridgeNFT) expect(v *liveView, a *Live, h *Health) {
	if v.firewallUnchanged {
		return // nothing to compare: skip building what is wanted
	}
	typ, backend, ok := masqPlugin(a)
	if !ok || backend != "nftables" || len(a.allAddrs()) == 0 {
		return
	}
	if _, err := v.nftRules(); err != nil {
		h.unknown(err)
		return
	}
	comment := a.NFTMasqComment(a.IfName)
	post, own := v.nftChain(nftMasqTable, "postrouting"), v.nftChain(nftMasqTable, nftMasqChain, comment)
	miss := func(chain, what string) {
		h.miss(Missing{Plugin: typ, Kind: KindNFTRule, Backend: "nftables", Detail: nftMasqTable.String() + " " + chain + ": " + what, Restore: ByCninet})
	}
	if countNFT(post, func(r host.NFTRule) bool { return r.Verdict == "return" }) < 2 {
		miss("postrouting", "the multicast returns")
	}
	if countNFT(post, func(r host.NFTRule) bool { return r.Verdict == "goto" && r.Target == nftMasqChain }) == 0 {
		miss("postrouting", "goto "+nftMasqChain)
	}
	for _, p := range a.allAddrs() {
		if countNFT(own, func(r host.NFTRule) bool { return r.Comment == comment && r.Saddr == p.Addr() }) == 0 {
			miss(nftMasqChain, fmt.Sprintf("masquerade from %s but to %s (comment %q)", p.Addr(), p.Masked(), comment))
		}
	}
}

// countNFT counts the rules that match.
func countNFT(rules []host.NFTRule, match func(host.NFTRule) bool) int {
	n := 0
	for _, r := range rules {
		if match(r) {
			n++
		}
	}
	return n
}
