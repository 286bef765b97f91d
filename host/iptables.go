package host

import (
	"context"
	"errors"
	"net/netip"
	"time"
)

// IPTables is the subset of *iptables.IPTables (github.com/coreos/go-iptables)
// that cninet's cleanup uses; *iptables.IPTables satisfies it unchanged.
// Config.IPTables replaces the default, one per family; tests give a fake.
//
// An implementation may also offer optional extensions, each found with
// a type assertion: TableLister, Saver,
// SaveStreamer and Restorer save processes on whole-host sweeps;
// ChainProber, AddrScanner and OtherAddrScanner let a Teardown rule
// chains out without listing them; HandleDeleter deletes by nf_tables
// handle; ContextBinder bounds every command by a context; RuleWriter
// writes what a repair restores. The default offers all of them on
// iptables-nft, and all but the three probes and HandleDeleter on
// iptables-legacy.
type IPTables interface {
	// List returns the rules of one chain as `iptables -t table -S chain`
	// prints them, the chain's own -N or -P line first. A chain that does
	// not exist is an error.
	List(table, chain string) ([]string, error)
	// Delete deletes one rule by its specification.
	Delete(table, chain string, rulespec ...string) error
	// ClearAndDeleteChain flushes and deletes a chain; a chain that does not
	// exist is not an error.
	ClearAndDeleteChain(table, chain string) error
}

// TableLister is an optional extension of IPTables: list a whole table in
// one command (`iptables -t table -S`).
type TableLister interface {
	ListTable(table string) ([]string, error)
}

// Saver is an optional extension of IPTables: list every table in one
// command (iptables-save), each table's lines in `iptables -S` form.
type Saver interface {
	SaveAll() (map[string][]string, error)
}

// Restorer is an optional extension of IPTables: apply many changes to one
// table in one `iptables-restore --noflush` transaction.
type Restorer interface {
	RestoreNoFlush(table string, lines []string) error
}

// ChainProber is an optional extension of IPTables: whether a chain
// exists, at a cost that does not grow with the table. A Teardown asks it
// instead of listing the chains an attachment can own; an error makes it
// list them after all.
type ChainProber interface {
	ProbeChain(table, chain string) (bool, error)
}

// AddrScanner is an optional extension of IPTables: whether any rule of a
// chain may be about one of addrs, read without listing the chain. false
// must prove that no rule of the chain matches or rewrites any of them;
// true only sends the caller to the real listing. An error does too.
type AddrScanner interface {
	MayMention(table, chain string, addrs []netip.Addr) (bool, error)
}

// ContextBinder is an optional extension of IPTables: the same IPTables,
// extensions included, with every command it runs bounded by ctx. A
// command still running when ctx ends is killed, one not yet started is
// not started, and the xtables lock is waited for no longer than ctx's
// deadline (DefaultLockWait for all commands together when ctx has none).
// Cleanup binds its context to an IPTables that offers this; one that
// does not runs unbounded.
type ContextBinder interface {
	WithContext(ctx context.Context) IPTables
}

// SaveStreamer is an optional extension of IPTables: iptables-save read
// as it is written. each is called with every line of tables, in
// `iptables -S` form (as Saver's), one at a time; line is valid only
// during the call (it is the reader's buffer), so that a line nobody
// keeps is never copied.
type SaveStreamer interface {
	SaveEach(tables []string, each func(table string, line []byte)) error
}

// OtherAddrScanner is an optional extension of IPTables: whether any rule
// of a chain may be about one of addrs while naming none of except (chain
// names the caller's own rules jump to). false must prove there is no
// such rule; true only sends the caller to the real listing.
type OtherAddrScanner interface {
	MayMentionOther(table, chain string, addrs []netip.Addr, except []string) (bool, error)
}

// HandleDeleter is an optional extension of IPTables: delete planned rules
// and chains of one table in constant time each, where iptables' own -D
// searches the chain for every rule. iptables on the nf_tables backend
// offers it: a rule goes by its nf_tables handle, but only when the chain,
// read again, holds at rule.Position a rule with the same comment whose
// expressions carry every address and the jump target the line names;
// otherwise it is left NotDeleted for the caller to delete by content
// (iptables-restore). Chains are flushed and deleted by name after the
// rules, except those that a rule left NotDeleted jumps to.
//
// The outcomes line up with rules and chains. An error says what could not
// be done; items it left NotDeleted may be deleted the usual way.
type HandleDeleter interface {
	DeleteByHandle(table string, rules []ListedRule, chains []string) (ruleOutcomes, chainOutcomes []HandleOutcome, err error)
}

// ListedRule is a rule as iptables listed it, and where.
type ListedRule struct {
	// Line is the rule as `iptables -S` prints it: "-A <chain> <spec…>".
	Line string
	// Position is its index among the rules of its chain in that listing.
	Position int
	// ChainLen is how many rules its chain had in that listing (0: not
	// known). Where the chain has another length now, it changed since,
	// and Position is not trusted: the rule is not deleted by handle.
	ChainLen int
}

// ErrXtablesLock says an iptables command could not have the xtables lock
// (iptables-legacy and iptables-legacy-restore take it for every listing
// and change; iptables-nft and iptables-save do not): another process held
// it until the wait ran out or the caller's context ended, or the lock
// file could not be opened. The error names the lock file, how long the
// command waited and, where the kernel says, the holder's pid. Nothing of
// that command was applied; running the same cleanup again once the lock
// is free finishes it.
var ErrXtablesLock = errors.New("xtables lock not acquired")

// DefaultLockWait bounds the xtables lock waits of an IPTables bound to a
// context without a deadline (see ContextBinder), all of its commands
// together, and of each command of an IPTables used unbound.
const DefaultLockWait = 30 * time.Second

// ErrIPTablesMissing says iptables (or ip6tables) could not be opened, so
// its state was not inspected.
var ErrIPTablesMissing = errors.New("iptables not available")

// RuleWriter is an optional extension of IPTables: what a repair writes
// (Check with CheckOptions.Repair), with the same commands the plugins
// run, so what it restores is byte for byte what they wrote. The
// signatures are go-iptables' (*iptables.IPTables satisfies it
// unchanged). Without it, a repair cannot restore a rule cninet writes
// itself (the bridge plugin's masquerade rules) and says so; what the
// plugins' own ADD restores is unaffected.
type RuleWriter interface {
	// ChainExists reports whether chain exists in table.
	ChainExists(table, chain string) (bool, error)
	// NewChain creates chain in table; one that exists is an error.
	NewChain(table, chain string) error
	// Exists reports whether the rule exists, as `iptables -C` does.
	Exists(table, chain string, rulespec ...string) (bool, error)
	// Append appends the rule to chain.
	Append(table, chain string, rulespec ...string) error
	// Insert inserts the rule into chain at pos (1 is the first).
	Insert(table, chain string, pos int, rulespec ...string) error
}

// NFTablesBacked is an optional extension of IPTables: whether its tables
// are nf_tables tables (iptables-nft). Every change to them is then an
// nf_tables change, which an NFTChangeWatcher sees, so the repair
// watcher's periodic pass need not list them again while no change
// arrived since a check found them whole. Without it (iptables-legacy, a
// wrapper that hides it) every pass lists them.
type NFTablesBacked interface {
	OnNFTables() bool
}
