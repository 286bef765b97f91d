package iptables

import (
	"errors"
	"strconv"
)

// The writes a repair makes (host.RuleWriter) are go-iptables' calls,
// run as the default's other commands are: by the command runner, under
// the bound context, with the xtables lock waited for until its deadline
// (see command). go-iptables' own methods, which the default embeds,
// would run unbound with a lock wait of their own.

// ChainExists implements RuleWriter: `iptables -t table -S chain`, where
// an answer that the chain is not there (IsNotExist) is false.
func (h *hostIPTables) ChainExists(table, chain string) (bool, error) {
	_, err := h.iptables("-t", table, "-S", chain)
	switch {
	case err == nil:
		return true, nil
	case IsNotExist(err):
		return false, nil
	}
	return false, err
}

// NewChain implements RuleWriter: `iptables -N`, which refuses a chain
// that exists.
func (h *hostIPTables) NewChain(table, chain string) error {
	_, err := h.iptables("-t", table, "-N", chain)
	return err
}

// Exists implements RuleWriter: `iptables -C`, whose exit status 1 says
// the rule (or its chain) is not there. Any other failure (the lock, a
// specification iptables cannot read, exit status 2) is an error.
func (h *hostIPTables) Exists(table, chain string, rulespec ...string) (bool, error) {
	_, err := h.iptables(append([]string{"-t", table, "-C", chain}, rulespec...)...)
	var exit interface{ ExitCode() int }
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false, nil
	}
	return false, err
}

// Append implements RuleWriter: `iptables -A`.
func (h *hostIPTables) Append(table, chain string, rulespec ...string) error {
	_, err := h.iptables(append([]string{"-t", table, "-A", chain}, rulespec...)...)
	return err
}

// Insert implements RuleWriter: `iptables -I chain pos`.
func (h *hostIPTables) Insert(table, chain string, pos int, rulespec ...string) error {
	_, err := h.iptables(append([]string{"-t", table, "-I", chain, strconv.Itoa(pos)}, rulespec...)...)
	return err
}

// builtinChains are each table's built-in chains, which iptables-nft
// lists (and writes into) whether or not nf_tables holds them yet: it
// creates them on first use.
var builtinChains = map[string][]string{
	"filter":   {"INPUT", "FORWARD", "OUTPUT"},
	"nat":      {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle":   {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	"raw":      {"PREROUTING", "OUTPUT"},
	"security": {"INPUT", "FORWARD", "OUTPUT"},
}

// ChainExists implements RuleWriter on iptables-nft without a process:
// a built-in chain exists, as iptables says; another is probed over
// netlink (ProbeChain).
func (h *nfIPTables) ChainExists(table, chain string) (bool, error) {
	for _, b := range builtinChains[table] {
		if b != chain {
			continue
		}
		if err := h.sameBinary(); err != nil {
			return false, err
		}
		return true, nil
	}
	return h.ProbeChain(table, chain)
}
