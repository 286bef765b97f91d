//go:build !linux

package footprint

import "errors"

var errNoNFNetlink = errors.New("nf_tables netlink exists on Linux only")

func nfProbeChain(family, table, chain string) (bool, error) { return false, errNoNFNetlink }

func nfAnyRule(family, table, chain string, match func(nlRule) bool) (bool, error) {
	return false, errNoNFNetlink
}

func nfDeleteRules(family, table string, targets []ruleTarget) ([]HandleOutcome, error) {
	return make([]HandleOutcome, len(targets)), errNoNFNetlink
}

func nfDeleteChains(family, table string, chains []string) ([]HandleOutcome, error) {
	return make([]HandleOutcome, len(chains)), errNoNFNetlink
}

func nfListTables() (map[NFTable]bool, error) { return nil, errNoNFNetlink }
