package footprint

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"sort"
	"strings"
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
// The name is allocated alone: a sweep keeps tens of thousands.
func (a Attachment) chainName(prefix string) string {
	if len(prefix) >= maxChainLength {
		return prefix[:maxChainLength]
	}
	sum := sha512.Sum512([]byte(a.Network + a.ID))
	var digits [2 * sha512.Size]byte
	hex.Encode(digits[:], sum[:])
	return prefix + string(digits[:maxChainLength-len(prefix)])
}

// isAttachmentChain reports whether chain is named as the plugins name an
// attachment's own chain: a prefix an iptables footprint names
// (chainPrefixes) and hex digits, 28 characters in all.
func isAttachmentChain(chain string) bool {
	if len(chain) != maxChainLength {
		return false
	}
	for _, prefix := range attachmentChainPrefixes {
		if digits, ok := strings.CutPrefix(chain, prefix); ok && strings.Trim(digits, "0123456789abcdef") == "" {
			return true
		}
	}
	return false
}

// containerID is the CNI rule for container ids; an id recovered from a
// rule must pass it before it is believed.
var containerID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// IsContainerID reports whether id is a valid CNI container id.
func IsContainerID(id string) bool { return containerID.MatchString(id) }

// idSet is a set of container ids.
type idSet map[string]bool

// attSet is a set of attachments: the ones a run removes.
type attSet map[Attachment]bool

// ids returns the container ids of the set's attachments.
func (s attSet) ids() idSet {
	ids := make(idSet, len(s))
	for a := range s {
		ids[a.ID] = true
	}
	return ids
}

// sorted returns the attachments ordered by network, then id.
func (s attSet) sorted() []Attachment {
	out := make([]Attachment, 0, len(s))
	for a := range s {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Network != out[j].Network {
			return out[i].Network < out[j].Network
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Plugin is one plugin of a conflist: its type and its configuration.
type Plugin struct {
	Type  string
	Bytes []byte
}

// configurer is a footprint that reads, from a network's plugins, where
// its plugin keeps state for the network's attachments.
type configurer interface {
	configure(n *Network)
}

// NetworkOf returns what the cleaner must know about the network a
// conflist defines: its plugins, and what each footprint reads from them
// (host-local's reservation directories, portmap's backend, …). IfName,
// IfNames and CacheDir are the caller's.
func NetworkOf(name string, plugins []Plugin) Network {
	n := Network{Name: name, Plugins: plugins}
	for _, fp := range footprints {
		if c, ok := fp.(configurer); ok {
			c.configure(&n)
		}
	}
	return n
}

// configs returns the configurations of the network's plugins of type
// typ, decoded into T; a plugin whose configuration does not decode is
// passed over.
func configs[T any](n Network, typ string) []T {
	var out []T
	for _, p := range n.Plugins {
		var conf T
		if (typ == "" || p.Type == typ) && json.Unmarshal(p.Bytes, &conf) == nil {
			out = append(out, conf)
		}
	}
	return out
}

// runs reports whether the network's conflist runs a plugin of type typ.
func (n Network) runs(typ string) bool {
	for _, p := range n.Plugins {
		if p.Type == typ {
			return true
		}
	}
	return false
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func appendOnce(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}
