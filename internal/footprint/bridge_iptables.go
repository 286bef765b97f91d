package footprint

import (
	"fmt"
	"strconv"
	"strings"
)

// The bridge plugin's ipMasq with the iptables backend (and ptp's) writes,
// per attachment and family, in table nat:
//
//	-A POSTROUTING -s <ip>/<full> -m comment --comment "name: \"N\" id: \"ID\"" -j CNI-<h[:24]>
//	-N CNI-<h[:24]>   (ACCEPT for the subnet, MASQUERADE for the rest, same comment)
//
// where h = hex(sha512(N+ID)). Its DEL skips all of it when the namespace
// is already gone.

const postrouting = "POSTROUTING"

// MasqChain is the bridge plugin's per-attachment nat chain, CNI-<h[:24]>
// (FormatChainName in the plugins' pkg/utils).
func (a Attachment) MasqChain() string { return a.chainName("CNI-") }

// MasqComment is the bridge plugin's comment, formatted with %q exactly as
// the plugin does (FormatComment in the plugins' pkg/utils).
func (a Attachment) MasqComment() string { return fmt.Sprintf("name: %q id: %q", a.Network, a.ID) }

// ownsMasqJump reports whether r is this attachment's POSTROUTING jump.
func (a Attachment) ownsMasqJump(r rule) bool {
	return r.chain == postrouting && ownsCommented(r, a.MasqComment(), a.MasqChain())
}

// masqCommentID returns the id a bridge plugin comment of network names,
// when the comment is exactly the plugin's (uncut) comment for it.
func masqCommentID(network, comment string) (string, bool) {
	prefix := fmt.Sprintf("name: %q id: ", network)
	if !strings.HasPrefix(comment, prefix) {
		return "", false
	}
	id, err := strconv.Unquote(strings.TrimPrefix(comment, prefix))
	if err != nil || !IsContainerID(id) || (Attachment{network, id}).MasqComment() != comment {
		return "", false
	}
	return id, true
}

// isMasqComment reports whether a comment has the shape the bridge plugin
// gives every attachment's rules, of any network.
func isMasqComment(c string) bool {
	return strings.HasPrefix(c, "name: ") && strings.Contains(c, " id: ")
}
