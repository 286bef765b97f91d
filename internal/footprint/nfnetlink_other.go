//go:build !linux

package footprint

import "errors"

var errNoNFNetlink = errors.New("nf_tables netlink exists on Linux only")

func nfProbeChain(family, table, chain string) (bool, error) { return false, errNoNFNetlink }

func nfAnyRule(family, table, chain string, match func(nlRule) bool) (bool, error) {
	return false, errNoNFNetlink
}
