package footprint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/seed1280861d/cninet/internal/fakeipt"
)

// legacyIPTables emulates iptables-legacy over fake tables: -S, -D, -F, -X,
// iptables-restore --noflush and iptables-save, each after taking the
// xtables lock (iptables-save excepted) as iptables -w N does. While the
// lock is held by another process it answers as iptables did when its -w
// ran out (from the captured messages), or, with block set, waits until
// ctx kills it, as it does when the deadline comes first.
type legacyIPTables struct {
	tables  *fakeipt.Batching
	giveUp  string // iptables' message when its wait runs out
	mu      sync.Mutex
	held    bool
	block   bool
	cmdline []string
}

func newLegacy(t *testing.T, tables *fakeipt.IPTables) *legacyIPTables {
	return &legacyIPTables{tables: &fakeipt.Batching{IPTables: tables},
		giveUp: capturedLockMessages(t)["iptables-legacy -w 1 -t nat -S POSTROUTING"]}
}

func (l *legacyIPTables) host(locking bool) *hostIPTables {
	return &hostIPTables{list: "iptables", save: "iptables-save", restore: "iptables-restore", locking: locking,
		run: l.run, holder: func(string) (int, bool) { return 4242, l.isHeld() }}
}

func (l *legacyIPTables) hold(held, block bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.block = held, block
}

func (l *legacyIPTables) isHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

func (l *legacyIPTables) commands() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cmdline)
}

var errExit = errors.New("exit status 1")

func (l *legacyIPTables) run(ctx context.Context, bin string, stdin []byte, args ...string) (string, string, error) {
	l.mu.Lock()
	l.cmdline = append(l.cmdline, bin+" "+strings.Join(args, " "))
	held, block := l.held, l.block
	l.mu.Unlock()
	if bin == "iptables-save" {
		return l.tables.Save("nat") + l.tables.Save("filter"), "", nil
	}
	n := len(args)
	if n < 2 || args[n-2] != "-w" {
		return "", "", fmt.Errorf("%s %q: no -w: iptables-legacy would wait for as long as the lock is held", bin, args)
	}
	if wait, err := strconv.Atoi(args[n-1]); err != nil || wait < 1 {
		return "", "", fmt.Errorf("-w %s: iptables-legacy would wait for as long as the lock is held", args[n-1])
	}
	if held && block {
		<-ctx.Done()
		return "", "", errors.New("signal: killed")
	}
	if held {
		return "", l.giveUp, errors.New("exit status 4")
	}
	if bin == "iptables-restore" {
		return "", "", l.restore(stdin)
	}
	return l.iptables(args[:n-2])
}

func (l *legacyIPTables) restore(stdin []byte) error {
	lines := strings.Split(strings.TrimSpace(string(stdin)), "\n")
	return l.tables.RestoreNoFlush(strings.TrimPrefix(lines[0], "*"), lines[1:len(lines)-1])
}

func (l *legacyIPTables) iptables(args []string) (string, string, error) {
	table, op, chain := args[1], args[2], args[3]
	var err error
	switch op {
	case "-S":
		var rules []string
		if rules, err = l.tables.List(table, chain); err == nil {
			return strings.Join(rules, "\n") + "\n", "", nil
		}
	case "-D":
		err = l.tables.Delete(table, chain, args[4:]...)
	case "-F":
		if !l.tables.HasChain(table, chain) {
			err = errors.New("iptables: No chain/target/match by that name.")
		}
	case "-X":
		err = l.tables.ClearAndDeleteChain(table, chain)
	}
	if err != nil {
		return "", err.Error(), errExit
	}
	return "", "", nil
}
