package footprint

import (
	"fmt"
	"strings"

	"github.com/seed1280861d/cninet/internal/iptables"
)

// portmap with the iptables backend writes, per attachment and family, in
// table nat:
//
//	-A CNI-HOSTPORT-DNAT -m comment --comment "dnat name: \"N\" id: \"ID\"" ... -j CNI-DN-<h[:21]>
//	-N CNI-DN-<h[:21]>   (DNAT and mark rules, no comment)
//
// Releases before 0.7 used a CNI-SN-<h[:21]> chain as well. The shared
// chains (CNI-HOSTPORT-DNAT, -SETMARK, -MASQ) belong to every attachment
// and are never deleted. Everything here is found by name, so it proves
// no address and holds none.

type portmapIPT struct{}

const hostportDNATChain = "CNI-HOSTPORT-DNAT"

// DNATChain is portmap's per-attachment nat chain, CNI-DN-<h[:21]>
// (MustFormatChainNameWithPrefix(N, ID, "DN-") in the plugins' pkg/utils).
func (a Attachment) DNATChain() string { return a.chainName("CNI-DN-") }

// SNATChain is the per-attachment chain of portmap releases before 0.7.
func (a Attachment) SNATChain() string { return a.chainName("CNI-SN-") }

// maxPortmapComment is where portmap cuts its comments (to 253 + "...").
const maxPortmapComment = 255

// DNATComment is portmap's comment, formatted (with %s, not %q) and cut
// exactly as the plugin does.
func (a Attachment) DNATComment() string {
	c := fmt.Sprintf(`dnat name: "%s" id: "%s"`, a.Network, a.ID)
	if len(c) > maxPortmapComment {
		c = c[:maxPortmapComment-2] + "..."
	}
	return c
}

// ownsDNATJump reports whether r is this attachment's CNI-HOSTPORT-DNAT
// jump.
func (a Attachment) ownsDNATJump(r iptables.Rule) bool {
	return r.Chain == hostportDNATChain && iptables.OwnsCommented(r, a.DNATComment(), a.DNATChain())
}

func (portmapIPT) prove(*view, attSet) []claim            { return nil }
func (portmapIPT) holders(*view, attSet, addrSet) []claim { return nil }

func (portmapIPT) plan(v *view, set attSet, _ *evidence, p *plan) {
	for _, f := range v.families() {
		if v.whole || f.anyChain("nat", chainsOf(set, Attachment.DNATChain)) {
			own := commentIndex(set, Attachment.DNATComment)
			rules, _ := f.rules("nat", hostportDNATChain)
			p.growIPT(f.v6, min(len(rules), len(set))+len(set)) // a jump and a chain each, at most
			for i := range rules {
				if a := ownerIn(rules[i], own[rules[i].Comment], Attachment.ownsDNATJump); a != nil {
					p.deleteRule(f.v6, *a, "nat", &rules[i])
				}
			}
		}
		for _, a := range set.sorted() {
			for _, ch := range []string{a.DNATChain(), a.SNATChain()} {
				if f.hasChain("nat", ch) {
					p.deleteChain(f.v6, a, "nat", ch)
				}
			}
		}
	}
}

func (portmapIPT) discover(v *view, found attSet) {
	for _, f := range v.families() {
		rules, _ := f.rules("nat", hostportDNATChain)
		for _, r := range rules {
			if a, ok := parseDNATComment(v, r.Comment); ok {
				found[a] = true
			}
		}
	}
}

// parseDNATComment returns the attachment of a known network an uncut
// portmap comment names.
func parseDNATComment(v *view, comment string) (Attachment, bool) {
	rest, ok := strings.CutPrefix(comment, `dnat name: "`)
	if !ok || !strings.HasSuffix(rest, `"`) {
		return Attachment{}, false
	}
	for _, name := range sortedKeys(v.nets) {
		if id, ok := strings.CutPrefix(rest, name+`" id: "`); ok {
			a := Attachment{name, strings.TrimSuffix(id, `"`)}
			if IsContainerID(a.ID) && a.DNATComment() == comment {
				return a, true
			}
		}
	}
	return Attachment{}, false
}
