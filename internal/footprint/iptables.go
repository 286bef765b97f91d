package footprint

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
)

// IPTables is the subset of *iptables.IPTables (github.com/coreos/go-iptables)
// that cleanup uses; *iptables.IPTables satisfies it unchanged. An
// implementation may also offer TableLister, Saver and Restorer to save
// processes on whole-host sweeps, and ContextBinder to bound its commands.
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
// The cleaner binds its context to an IPTables that offers this; one that
// does not runs unbounded.
type ContextBinder interface {
	WithContext(ctx context.Context) IPTables
}

// bindContext returns ipt bound to ctx where it is a ContextBinder.
func bindContext(ctx context.Context, ipt IPTables) IPTables {
	if b, ok := ipt.(ContextBinder); ok && ctx != nil {
		return b.WithContext(ctx)
	}
	return ipt
}

// isNotExist reports whether err says a chain or rule does not exist, for
// go-iptables errors and for fakes that mimic iptables' messages.
//
// iptables 1.8.9 with the nf_tables backend (Debian 12's) answers `-S` of
// a chain that does not exist with "chain `X' in table `T' is
// incompatible, use 'nft' tool" instead. The chains cleanup lists were
// written by iptables itself (the plugins', and the built-in ones), so for
// them that answer means absent; and reading it so can only make cleanup
// delete less, never more.
//
// A failure to have the xtables lock is never absence, though go-iptables'
// own IsNotExist says so when the lock file cannot be opened ("No such
// file or directory").
func isNotExist(err error) bool {
	if errors.Is(err, ErrXtablesLock) || mentionsLock(err.Error()) {
		return false
	}
	var ne interface{ IsNotExist() bool }
	if errors.As(err, &ne) && ne.IsNotExist() {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "No chain/target/match by that name") ||
		strings.Contains(msg, "does not exist") || strings.Contains(msg, "Bad rule") ||
		(strings.Contains(msg, "in table `") && strings.Contains(msg, "is incompatible, use 'nft' tool"))
}

// Tables opens iptables and ip6tables once each, for every cleaner of one
// Configurator; a failed open (say, ip6tables missing) is retried on the
// next use. The zero value opens the host's with NewHostIPTables.
type Tables struct {
	Open   func(ipv6 bool) (IPTables, error)
	mu     sync.Mutex
	tables [2]IPTables
}

// Get returns the family's IPTables.
func (t *Tables) Get(ipv6 bool) (IPTables, error) {
	i := 0
	if ipv6 {
		i = 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s, ok := t.tables[i].(interface{ switched() bool }); ok && s.switched() {
		t.tables[i] = nil // an operator switched iptables' backend: open it anew
	}
	if t.tables[i] != nil {
		return t.tables[i], nil
	}
	open := t.Open
	if open == nil {
		open = NewHostIPTables
	}
	ipt, err := open(ipv6)
	if err != nil {
		return nil, err
	}
	t.tables[i] = ipt
	return ipt, nil
}
