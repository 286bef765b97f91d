package attachments

import (
	"slices"
	"strconv"
	"strings"

	"github.com/seed1280861d/cninet/internal/catalog"
)

// Attachment is one allocation on one network, with its interface name
// (at first its place in the allocation's list).
type Attachment struct {
	Conf   catalog.Conf
	IfName string // ifPrefix + the network's index in the allocation's list
	// ViaCNI: the default network as the first interface, which go-cni (or
	// Config.CNI) attaches — the single-network path, unchanged.
	ViaCNI bool
}

func (att Attachment) Name() string { return att.Conf.Info.Name }

// Found is an attachment as found in the allocation and in
// libcni's cache, with the request its plugins are told.
type Found struct {
	Att    Attachment
	Req    Request
	Cached bool // libcni's cache knows the attachment
	// Settled: its ADD returned. The registry's record says attached, or
	// (no record of it) libcni's cache, written once the ADD succeeded,
	// holds it. An attachment recorded as adding or detaching, or known
	// from an intent record, may still have a plugin (or a plugin's nft,
	// orphaned by a killed process) writing.
	Settled bool
}

// IfNaming names a workload's interfaces: <prefix>N, N the network's
// place among the workload's networks.
type IfNaming struct{ Prefix string }

// at is the name of the interface at place i.
func (n IfNaming) at(i int) string { return n.Prefix + strconv.Itoa(i) }

// Free returns <prefix>N for the lowest N no name in used has.
func (n IfNaming) Free(used []string) string {
	for i := 0; ; i++ {
		if name := n.at(i); !slices.Contains(used, name) {
			return name
		}
	}
}

// index is N of <prefix>N, or a large number for any other name.
func (n IfNaming) index(ifName string) int {
	if i, err := strconv.Atoi(strings.TrimPrefix(ifName, n.Prefix)); err == nil && strings.HasPrefix(ifName, n.Prefix) && i >= 0 {
		return i
	}
	return 1 << 30
}

// All are the interface names an attachment of any network may have:
// a workload joining count networks has <prefix>0 … <prefix>(count-1).
func (n IfNaming) All(count int) []string {
	names := make([]string, max(count, 1))
	for i := range names {
		names[i] = n.at(i)
	}
	return names
}
