package footprint

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"strings"
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
// namespace is already gone.

var nftMasqTable = NFTable{Family: "inet", Name: "cni_plugins_masquerade"}

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
// the attachment's interface ifName, cut as the plugin cuts it.
func (a Attachment) NFTMasqComment(ifName string) string {
	drop := func(s string) string { return strings.ReplaceAll(s, `"`, "") }
	c := fmt.Sprintf("%s-%s, net: %s, if: %s, id: %s",
		nftHash(a.Network), nftHash(ifName+":"+a.ID), drop(a.Network), drop(ifName), drop(a.ID))
	if len(c) > maxNFTComment {
		c = c[:maxNFTComment]
	}
	return c
}

// ownsNFTMasq reports whether r is one of the attachment's masquerade
// rules. The comment's hashes name network, interface and the whole id,
// so even a cut comment belongs to exactly one attachment.
func (a Attachment) ownsNFTMasq(r NFTRule, ifName string) bool {
	return r.Family == nftMasqTable.Family && r.Table == nftMasqTable.Name && r.Chain == nftMasqChain &&
		r.Comment == a.NFTMasqComment(ifName)
}

// isNFTMasq reports whether r is any attachment's masquerade rule.
func isNFTMasq(r NFTRule) bool {
	return r.Family == nftMasqTable.Family && r.Table == nftMasqTable.Name && r.Chain == nftMasqChain && r.Comment != ""
}

// nftMasqCommentID returns the id an uncut masquerade comment of network
// names, under one of the interface names ifNames.
func nftMasqCommentID(network string, ifNames []string, comment string) (string, bool) {
	i := strings.LastIndex(comment, ", id: ")
	if i < 0 {
		return "", false
	}
	id := comment[i+len(", id: "):]
	if !IsContainerID(id) {
		return "", false
	}
	for _, ifName := range ifNames {
		if (Attachment{network, id}).NFTMasqComment(ifName) == comment {
			return id, true
		}
	}
	return "", false
}
