package fakeipt

import (
	"context"
	"errors"
	"fmt"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Legacy emulates iptables-legacy over fake tables: -S, -D, -F, -X, -C,
// -N, -A, -I, iptables-restore --noflush and iptables-save, each after taking the
// xtables lock (iptables-save excepted) as iptables -w N does. While the
// lock is held by another process it answers as iptables did when its -w
// ran out (from the captured messages), or, with block set, waits until
// ctx kills it, as it does when the deadline comes first.
type Legacy struct {
	Tables  *fakes.Batching // the tables it changes
	giveUp  string          // iptables' message when its wait runs out
	mu      sync.Mutex
	held    bool
	block   bool
	cmdline []string
}

// NewLegacy returns an emulated iptables-legacy over tables. giveUp is
// what iptables prints when its lock wait runs out (tests read it from
// testdata/iptables/xtables-lock.txt); give Run to
// iptables.NewEmulated as the command runner.
func NewLegacy(tables *fakes.IPTables, giveUp string) *Legacy {
	return &Legacy{Tables: &fakes.Batching{IPTables: tables}, giveUp: giveUp}
}

// Hold makes another process hold the xtables lock (held) or let it go;
// with block, a command waits for its context to end instead of giving up.
func (l *Legacy) Hold(held, block bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.block = held, block
}

// IsHeld reports whether the lock is held: the holder iptables.NewEmulated
// asks about.
func (l *Legacy) IsHeld() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// Commands returns every command line run so far, in order.
func (l *Legacy) Commands() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.cmdline)
}

// ExitStatus is the error of an iptables command that exited with that
// status; like *exec.ExitError, it says so by ExitCode.
type ExitStatus int

func (e ExitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// ExitCode is the command's exit status.
func (e ExitStatus) ExitCode() int { return int(e) }

// ErrExit is the error of an iptables command that failed (exit status 1).
var ErrExit error = ExitStatus(1)

// Run runs one emulated command: the command runner of
// iptables.NewEmulated.
func (l *Legacy) Run(ctx context.Context, bin string, stdin []byte, args ...string) (string, string, error) {
	l.mu.Lock()
	l.cmdline = append(l.cmdline, bin+" "+strings.Join(args, " "))
	held, block := l.held, l.block
	l.mu.Unlock()
	if bin == "iptables-save" {
		return l.Tables.Save("nat") + l.Tables.Save("filter"), "", nil
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
		return "", l.giveUp, ExitStatus(4)
	}
	if bin == "iptables-restore" {
		return "", "", l.restore(stdin)
	}
	return l.iptables(args[:n-2])
}

func (l *Legacy) restore(stdin []byte) error {
	lines := strings.Split(strings.TrimSpace(string(stdin)), "\n")
	return l.Tables.RestoreNoFlush(strings.TrimPrefix(lines[0], "*"), lines[1:len(lines)-1])
}

func (l *Legacy) iptables(args []string) (string, string, error) {
	table, op, chain := args[1], args[2], args[3]
	var err error
	switch op {
	case "-S":
		var rules []string
		if rules, err = l.Tables.List(table, chain); err == nil {
			return strings.Join(rules, "\n") + "\n", "", nil
		}
	case "-D":
		err = l.Tables.Delete(table, chain, args[4:]...)
	case "-F":
		if !l.Tables.HasChain(table, chain) {
			//lint:ignore ST1005 iptables-legacy's own message, word for word: callers match it
			err = errors.New("iptables: No chain/target/match by that name.")
		}
	case "-X":
		err = l.Tables.ClearAndDeleteChain(table, chain)
	case "-C":
		var found bool
		if found, err = l.Tables.Exists(table, chain, args[4:]...); err == nil && !found {
			//lint:ignore ST1005 iptables-legacy's own message, word for word
			err = errors.New("iptables: Bad rule (does a matching rule exist in that chain?).")
		}
	case "-N":
		err = l.Tables.NewChain(table, chain)
	case "-A":
		err = l.Tables.Append(table, chain, args[4:]...)
	case "-I":
		pos, convErr := strconv.Atoi(args[4])
		if convErr != nil {
			return "", "iptables: Invalid rule number `" + args[4] + "'", ExitStatus(2)
		}
		err = l.Tables.Insert(table, chain, pos, args[5:]...)
	}
	if err != nil {
		return "", err.Error(), ErrExit
	}
	return "", "", nil
}

// LockMessages reads what iptables printed when it could not have the
// xtables lock, by command line, from a capture in the format of
// testdata/iptables/xtables-lock.txt ("### <command>", its output, "exit
// status N").
func LockMessages(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	msgs, cmd := map[string]string{}, ""
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "### "):
			cmd = strings.TrimPrefix(line, "### ")
		case cmd != "" && !strings.HasPrefix(line, "exit status "):
			msgs[cmd] += line + "\n"
		}
	}
	return msgs, nil
}
