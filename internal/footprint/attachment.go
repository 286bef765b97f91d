package footprint

import (
	"crypto/sha512"
	"encoding/hex"
	"regexp"
)

// Attachment identifies one attachment: the CNI network and the container
// id. The plugins derive every per-attachment name from these two strings.
type Attachment struct {
	Network, ID string
}

// maxChainLength is the longest chain name iptables accepts, and the
// length of every chain name the plugins derive.
const maxChainLength = 28

// chainName is the plugins' per-attachment chain name: prefix followed by
// the hex SHA-512 of network+id, cut to 28 characters.
func (a Attachment) chainName(prefix string) string {
	sum := sha512.Sum512([]byte(a.Network + a.ID))
	return (prefix + hex.EncodeToString(sum[:]))[:maxChainLength]
}

// containerID is the CNI rule for container ids; an id recovered from a
// rule must pass it before it is believed.
var containerID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// IsContainerID reports whether id is a valid CNI container id.
func IsContainerID(id string) bool { return containerID.MatchString(id) }

// idSet is a set of container ids.
type idSet map[string]bool

func newIDSet(ids []string) idSet {
	s := make(idSet, len(ids))
	for _, id := range ids {
		s[id] = true
	}
	return s
}
