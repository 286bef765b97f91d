package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
)

// NFTable names one nftables table.
type NFTable struct {
	Family, Name string
}

// String renders the table as nft names it: "<family> <name>".
func (t NFTable) String() string { return t.Family + " " + t.Name }

// NFTables is how cninet's cleanup reads and changes the tables the
// plugins' nftables backends write (inet cni_plugins_masquerade, ip and
// ip6 cni_hostport). Config.NFTables replaces the default, which runs nft
// and reads nf_tables over netlink; tests give a fake. An implementation
// may also offer NFTRuleMatcher, NFTRuleFinder, NFTRuleLookup,
// NFTBriefLister and NFTHandleDeleter (cleanup), and NFTScriptRunner and
// NFTChangeWatcher (repairs); the default offers all seven.
type NFTables interface {
	// ListRules returns the rules of those of tables that exist; a table
	// that does not exist is no error.
	ListRules(ctx context.Context, tables []NFTable) ([]NFTRule, error)
	// DeleteRules deletes rules of one table by chain and handle, in one
	// transaction: all of them, or none and an error.
	DeleteRules(ctx context.Context, table NFTable, rules []NFTRule) error
}

// NFTRule is one rule of an nftables listing, reduced to what ownership
// needs: where it is, its comment, and the addresses its expressions
// match on or translate to.
type NFTRule struct {
	Family, Table, Chain string
	Handle               int
	Comment              string
	// Saddr and Daddr are the addresses an `ip[6] saddr ==` or `ip[6]
	// daddr ==` match names (invalid when there is none, or it is a
	// prefix or a negation); DNAT is the address a `dnat to` translates to.
	Saddr, Daddr, DNAT netip.Addr
	// DPort is the port a `<proto> dport ==` (or `th dport ==`) match
	// names, and DNATPort the port a `dnat to <addr>:<port>` translates
	// to; 0 when there is none. A drift check names a missing port
	// mapping by them.
	DPort, DNATPort uint16
	// L4Proto is the transport protocol DPort is of, as nft lists
	// `<protocol> dport` ("tcp", "udp", …); "" for `th dport`.
	L4Proto string
	// Verdict is the rule's verdict when it ends in one ("jump", "goto",
	// "return", "accept", "drop"; "" otherwise), and Target the chain a
	// jump or goto names: a drift check finds the shared chains' jumps
	// by them.
	Verdict, Target string
	// Expr is the rule's expressions as nft listed them, where the
	// NFTables lists with nft (none in a brief listing; none from cninet's
	// default, which lists over netlink); cleanup decides by the fields
	// above and never reads it.
	Expr json.RawMessage
}

// String renders the rule for logs and reports.
func (r NFTRule) String() string {
	s := fmt.Sprintf("%s %s %s handle %d", r.Family, r.Table, r.Chain, r.Handle)
	for _, a := range []struct {
		name string
		addr netip.Addr
	}{{"saddr", r.Saddr}, {"daddr", r.Daddr}, {"dnat to", r.DNAT}} {
		if a.addr.IsValid() {
			s += " " + a.name + " " + a.addr.String()
		}
	}
	if r.Comment != "" {
		s += fmt.Sprintf(" comment %q", r.Comment)
	}
	return s
}

// NFTRuleSketch is a rule as nf_tables itself reports it, without nft:
// where it is, its comment, and its expressions undecoded.
type NFTRuleSketch struct {
	Table   NFTable
	Chain   string
	Handle  int // 0 where the NFTables does not say: nothing is then looked up by it
	Comment string
	// Raw is the rule's expressions as nf_tables encodes them; every
	// address the rule matches on or rewrites to is in it, byte for byte.
	// It is valid only during the call that is given the sketch.
	Raw []byte
}

// Mentions reports whether any of addrs is in the rule's expressions.
// false proves the rule is about none of them; true may be a coincidence.
func (s NFTRuleSketch) Mentions(addrs []netip.Addr) bool {
	for _, a := range addrs {
		if b := a.Unmap().AsSlice(); len(b) > 0 && bytes.Contains(s.Raw, b) {
			return true
		}
	}
	return false
}

// NFTRuleMatcher is an optional extension of NFTables: whether match holds
// for a rule of those of tables that exist, read in-process and stopping
// at the first. match is called for one rule at a time, and a false
// answer without an error means it was called for every rule of the
// tables. A Teardown asks it whether anything there can be its own before
// it lists the tables with nft; an error makes it list them.
type NFTRuleMatcher interface {
	AnyRule(ctx context.Context, tables []NFTable, match func(NFTRuleSketch) bool) (bool, error)
}

// NFTChain names one chain of an nftables table.
type NFTChain struct {
	Table NFTable
	Name  string
}

// NFTRuleFinder is an optional extension of NFTables: the rules of chains
// whose comment is one of comments, read in-process. Only the named
// chains are read (nf_tables dumps one chain of one table on request),
// and a rule is judged by its comment before anything else of it is
// read: a rule with another comment costs no copy. A chain or table that
// does not exist holds none. Before portmap's DEL, which deletes by the
// bare container id, a Teardown asks it for the hostport rules of its
// ids (and its own masquerade rules) instead of scanning whole tables
// with NFTRuleMatcher. The sketches' Raw is the caller's to keep. The
// default answers it (and AnyRule) from a copy of the tables asked that
// nf_tables' notifications keep current, exact as of the question.
type NFTRuleFinder interface {
	FindRules(ctx context.Context, chains []NFTChain, comments []string) ([]NFTRuleSketch, error)
}

// NFTRuleLookup is an optional extension of NFTables: one rule, found
// by its handle in table and chain, read in-process without reading the
// rest of the table (found is false when there is no such rule, chain or
// table). A Teardown that saw, before its DEL, every rule of its own
// (masquerade and hostport) checks after the DEL that those rules are
// gone with one lookup each, instead of reading the tables again. The
// sketch's Raw is the caller's to keep.
type NFTRuleLookup interface {
	LookupRule(ctx context.Context, table NFTable, chain string, handle int) (rule NFTRuleSketch, found bool, err error)
}

// NFTBriefLister is an optional extension of NFTables: ListRules without
// the rules' Expr, which is most of their size. A GC sweep, which holds
// the listing of every leaked attachment at once, lists with it.
type NFTBriefLister interface {
	ListRulesBrief(ctx context.Context, tables []NFTable) ([]NFTRule, error)
}

// ErrNFTablesMissing says the host has no nft command. A host without
// nftables has no nftables rules either, so cleanup does not count it as
// a failure.
var ErrNFTablesMissing = errors.New("nft not available")

// NFTHandleDeleter is an optional extension of NFTables: delete listed
// rules of one table by handle and say what became of each. A rule is
// deleted only while the rule with its handle is still the one listed:
// same chain and comment, and every address the listing gave it (Saddr,
// Daddr, DNAT) in its expressions; otherwise it is left NotDeleted. A
// rule nf_tables no longer has is AlreadyGone. The outcomes line up with
// rules.
type NFTHandleDeleter interface {
	DeleteByHandle(ctx context.Context, table NFTable, rules []NFTRule) ([]HandleOutcome, error)
}

// NFTScriptRunner is an optional extension of NFTables: run an nft script
// (as `nft -f -` reads it) as one transaction, all of it or nothing. A
// repair (Check with CheckOptions.Repair) writes what the plugins' own
// library would write through it, in the same words, so nft stores it
// byte for byte as theirs. Without it, a repair cannot restore what
// cninet writes itself on nftables and says so.
type NFTScriptRunner interface {
	RunScript(ctx context.Context, script string) error
}

// NFTChangeWatcher is an optional extension of NFTables: a signal on
// every change of the nf_tables ruleset of the caller's network
// namespace that may remove something (a deletion, a replaced rule, a
// flush), whoever makes it (nft, iptables-nft, firewalld); additions
// alone need not signal, since a drift is only ever something removed.
// The channel receives after each such change (several may share one
// receive: a burst is one signal or a few) and is closed when ctx ends
// or watching fails. The repair watcher (Config.RepairEvery) checks
// the live attachments again at once on a signal.
type NFTChangeWatcher interface {
	WatchChanges(ctx context.Context) (<-chan struct{}, error)
}
