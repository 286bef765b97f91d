//go:build !linux

package nfnetlink

import (
	"context"
	"errors"

	"github.com/seed1280861d/cninet/host"
)

var errNoNFNetlink = errors.New("nf_tables netlink exists on Linux only")

func ProbeChain(family, table, chain string) (bool, error) { return false, errNoNFNetlink }

func LookupRule(family, table, chain string, handle uint64) (Rule, bool, error) {
	return Rule{}, false, errNoNFNetlink
}

func AnyRule(family, table, chain string, match func(Rule) bool) (bool, error) {
	return false, errNoNFNetlink
}

func FindRules(family, table string, chains []string, comments map[string]bool) ([]Rule, error) {
	return nil, errNoNFNetlink
}

func ListRules(family, table string) ([]Rule, error) { return nil, errNoNFNetlink }

func EachRule(family, table string, begin func(), visit func(Rule) error) error {
	return errNoNFNetlink
}

func DeleteRules(family, table string, targets []Target) ([]host.HandleOutcome, error) {
	return make([]host.HandleOutcome, len(targets)), errNoNFNetlink
}

func DeleteChains(family, table string, chains []string) ([]host.HandleOutcome, error) {
	return make([]host.HandleOutcome, len(chains)), errNoNFNetlink
}

func ListTables() (map[host.NFTable]bool, error) { return nil, errNoNFNetlink }

func WatchChanges(ctx context.Context) (<-chan struct{}, error) { return nil, errNoNFNetlink }

func OpenMirror() (*Mirror, error) { return nil, errNoNFNetlink }
