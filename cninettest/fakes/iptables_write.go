package fakes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// What a repair writes (host.RuleWriter), answered as iptables answers
// it. A rule is held as the line `iptables -S` prints for its
// specification (FormatRule puts it in iptables' order, a lone address
// as a prefix), and Exists compares those lines: it finds a rule written
// in the plugins' words (the bridge plugin's `-d <net> -j ACCEPT -m
// comment --comment <c>`) as iptables -C does. iptables compares the
// parsed rule, so it also sees through what FormatRule does not: long
// option names (--source, --jump), a target option's other spelling
// (--to for --to-destination), a protocol by number, values iptables
// rewrites (a multiport list, conntrack states in another order), a
// protocol option after another match's. Write those as iptables prints
// them.

// ChainExists implements host.RuleWriter.
func (t *IPTables) ChainExists(table, chain string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, "ChainExists "+table+" "+chain)
	if err := t.FailList[table+"/"+chain]; err != nil {
		return false, err
	}
	_, ok := t.tables[table][chain]
	return ok, nil
}

// NewChain implements host.RuleWriter: a chain that exists is an error,
// as `iptables -N` says.
func (t *IPTables) NewChain(table, chain string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, "NewChain "+table+" "+chain)
	if err := t.FailWrite[table+"/"+chain]; err != nil {
		return err
	}
	if _, ok := t.tables[table][chain]; ok {
		return &IPTablesError{Msg: fmt.Sprintf("running [iptables -t %s -N %s]: exit status 1: iptables: Chain already exists.", table, chain)}
	}
	if t.tables[table] == nil {
		t.tables[table] = map[string][]string{}
	}
	t.tables[table][chain] = nil
	return nil
}

// Exists implements host.RuleWriter, as `iptables -C` does: false, and
// no error, for a rule or chain that is not there (see the head of this
// file for how rules compare).
func (t *IPTables) Exists(table, chain string, spec ...string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, "Exists "+table+" "+chain+" "+strings.Join(spec, " "))
	if err := t.FailList[table+"/"+chain]; err != nil {
		return false, err
	}
	return slices.Contains(t.tables[table][chain], "-A "+chain+" "+FormatRule(spec)), nil
}

// Append implements host.RuleWriter, as go-iptables' Append does.
func (t *IPTables) Append(table, chain string, spec ...string) error {
	return t.insert("Append "+table+" "+chain+" "+strings.Join(spec, " "), table, chain, -1, spec)
}

// Insert implements host.RuleWriter: pos 1 is the first rule; a position
// past the rule after the last is an error, as iptables says.
func (t *IPTables) Insert(table, chain string, pos int, spec ...string) error {
	return t.insert("Insert "+table+" "+chain+" "+strconv.Itoa(pos)+" "+strings.Join(spec, " "), table, chain, pos, spec)
}

// insert puts a rule at pos (1 first; -1: last).
func (t *IPTables) insert(call, table, chain string, pos int, spec []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, call)
	if err := t.FailWrite[table+"/"+chain]; err != nil {
		return err
	}
	rules, ok := t.tables[table][chain]
	switch {
	case !ok:
		return &IPTablesError{Msg: "iptables: No chain/target/match by that name.", NotExist: true}
	case pos == -1:
		pos = len(rules) + 1
	case pos < 1:
		return &IPTablesError{Msg: fmt.Sprintf("iptables v1.8.9: Invalid rule number `%d'", pos)}
	case pos > len(rules)+1:
		return &IPTablesError{Msg: "iptables: Index of insertion too big."}
	}
	t.tables[table][chain] = slices.Insert(rules, pos-1, "-A "+chain+" "+FormatRule(spec))
	return nil
}
