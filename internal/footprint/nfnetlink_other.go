//go:build !linux

package footprint

import "errors"

var errNoNFNetlink = errors.New("nf_tables netlink exists on Linux only")

func nfChainExists(family, table, chain string) (bool, error) { return false, errNoNFNetlink }

func nfRules(family, table, chain string) ([]nlRule, error) { return nil, errNoNFNetlink }
