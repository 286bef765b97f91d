package iptables

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/seed1280861d/cninet/host"
)

// BindContext returns ipt bound to ctx where it is a ContextBinder.
func BindContext(ctx context.Context, ipt host.IPTables) host.IPTables {
	if b, ok := ipt.(host.ContextBinder); ok && ctx != nil {
		return b.WithContext(ctx)
	}
	return ipt
}

// IsNotExist reports whether err says a chain or rule does not exist, for
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
func IsNotExist(err error) bool {
	if errors.Is(err, host.ErrXtablesLock) || mentionsLock(err.Error()) {
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

// Opener opens iptables and ip6tables once each, for every cleaner of one
// Configurator; a failed open (say, ip6tables missing) is retried on the
// next use. The zero value opens the host's with New.
type Opener struct {
	Open   func(ipv6 bool) (host.IPTables, error)
	mu     sync.Mutex
	tables [2]host.IPTables
}

// Get returns the family's IPTables.
func (t *Opener) Get(ipv6 bool) (host.IPTables, error) {
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
		open = New
	}
	ipt, err := open(ipv6)
	if err != nil {
		return nil, err
	}
	t.tables[i] = ipt
	return ipt, nil
}
