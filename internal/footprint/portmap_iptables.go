package footprint

import "fmt"

// portmap with the iptables backend writes, per attachment and family, in
// table nat:
//
//	-A CNI-HOSTPORT-DNAT -m comment --comment "dnat name: \"N\" id: \"ID\"" ... -j CNI-DN-<h[:21]>
//	-N CNI-DN-<h[:21]>   (DNAT and mark rules, no comment)
//
// Releases before 0.7 used a CNI-SN-<h[:21]> chain as well. The shared
// chains (CNI-HOSTPORT-DNAT, -SETMARK, -MASQ) belong to every attachment
// and are never deleted.

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
func (a Attachment) ownsDNATJump(r rule) bool {
	return r.chain == hostportDNATChain && ownsCommented(r, a.DNATComment(), a.DNATChain())
}

// dnatCommentID returns the id of an uncut portmap comment of network.
func dnatCommentID(network, comment string) (string, bool) {
	prefix := fmt.Sprintf(`dnat name: "%s" id: "`, network)
	if len(comment) < len(prefix)+1 || comment[:len(prefix)] != prefix || comment[len(comment)-1] != '"' {
		return "", false
	}
	id := comment[len(prefix) : len(comment)-1]
	return id, IsContainerID(id) && (Attachment{network, id}).DNATComment() == comment
}
