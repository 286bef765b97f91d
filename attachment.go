package cninet

import (
	"slices"
	"strconv"
	"strings"

	"github.com/seed1280861d/cninet/internal/catalog"
)

// attachment is one allocation on one network, with its interface name
// (at first its place in the allocation's list).
type attachment struct {
	conf   catalog.Conf
	ifName string // ifPrefix + the network's index in the allocation's list
	// viaCNI: the default network as the first interface, which go-cni (or
	// Config.CNI) attaches — the single-network path, unchanged.
	viaCNI bool
}

func (att attachment) name() string { return att.conf.Info.Name }

// foundAttachment is an attachment as found in the allocation and in
// libcni's cache, with the request its plugins are told.
type foundAttachment struct {
	att    attachment
	req    request
	cached bool // libcni's cache knows the attachment
	// settled: its ADD returned. The registry's record says attached, or
	// (no record of it) libcni's cache, written once the ADD succeeded,
	// holds it. An attachment recorded as adding or detaching, or known
	// from an intent record, may still have a plugin (or a plugin's nft,
	// orphaned by a killed process) writing.
	settled bool
}

// ifNaming names a workload's interfaces: <prefix>N, N the network's
// place among the workload's networks.
type ifNaming struct{ prefix string }

// at is the name of the interface at place i.
func (n ifNaming) at(i int) string { return n.prefix + strconv.Itoa(i) }

// free returns <prefix>N for the lowest N no name in used has.
func (n ifNaming) free(used []string) string {
	for i := 0; ; i++ {
		if name := n.at(i); !slices.Contains(used, name) {
			return name
		}
	}
}

// index is N of <prefix>N, or a large number for any other name.
func (n ifNaming) index(ifName string) int {
	if i, err := strconv.Atoi(strings.TrimPrefix(ifName, n.prefix)); err == nil && strings.HasPrefix(ifName, n.prefix) && i >= 0 {
		return i
	}
	return 1 << 30
}

// all are the interface names an attachment of any network may have:
// a workload joining count networks has <prefix>0 … <prefix>(count-1).
func (n ifNaming) all(count int) []string {
	names := make([]string, max(count, 1))
	for i := range names {
		names[i] = n.at(i)
	}
	return names
}
