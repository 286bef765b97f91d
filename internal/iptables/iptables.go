package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goiptables "github.com/coreos/go-iptables/iptables"
	"github.com/seed1280861d/cninet/host"
)

// hostIPTables is the default IPTables: go-iptables plus the extensions,
// run against the same binaries. Bound to a context (WithContext) it runs
// every command itself, under that context, with a lock wait that ends by
// the context's deadline; unbound, go-iptables runs List, Delete and
// ClearAndDeleteChain with a lock wait of DefaultLockWait.
type hostIPTables struct {
	*goiptables.IPTables
	list, save, restore string // binaries

	// locking says the binaries take the xtables lock (iptables-legacy);
	// iptables-nft accepts -w and ignores it.
	locking bool
	run     Runner
	holder  func(lockFile string) (pid int, held bool)

	ctx     context.Context // nil: unbound
	lockEnd time.Time       // when lock waits must be over (bound only)
}

// Runner runs one command under ctx and returns its stdout and
// stderr; tests replace it.
type Runner func(ctx context.Context, bin string, stdin []byte, args ...string) (stdout, stderr string, err error)

// New opens the host's iptables (ipv6 false) or ip6tables.
func New(ipv6 bool) (host.IPTables, error) {
	proto, list, save, restore := goiptables.ProtocolIPv4, "iptables", "iptables-save", "iptables-restore"
	if ipv6 {
		proto, list, save, restore = goiptables.ProtocolIPv6, "ip6tables", "ip6tables-save", "ip6tables-restore"
	}
	ipt, err := goiptables.New(goiptables.IPFamily(proto), goiptables.Timeout(int(host.DefaultLockWait/time.Second)))
	if err != nil {
		return nil, err
	}
	h := &hostIPTables{IPTables: ipt, locking: true, run: runCommand, holder: lockHolder}
	if h.list, err = exec.LookPath(list); err != nil {
		return nil, err
	}
	h.save, _ = exec.LookPath(save)       // optional: without it tables are listed one by one
	h.restore, _ = exec.LookPath(restore) // optional: without it deletions go rule by rule
	if nf, err := onNFTables(h, ipv6); err == nil {
		h.locking = false
		return nf, nil
	}
	return h, nil
}

// NewEmulated returns the default IPTables over commands that run runs
// instead of processes: iptables, iptables-save and iptables-restore,
// taking the xtables lock as iptables-legacy does when locking, holder
// saying who holds it. It is for tests that emulate iptables (see
// fakeipt.Legacy); cninet itself uses New.
func NewEmulated(run Runner, locking bool, holder func(lockFile string) (pid int, held bool)) host.IPTables {
	return &hostIPTables{list: "iptables", save: "iptables-save", restore: "iptables-restore", locking: locking,
		run: run, holder: holder}
}

// WithContext implements ContextBinder.
func (h *hostIPTables) WithContext(ctx context.Context) host.IPTables { return h.bound(ctx) }

func (h *hostIPTables) bound(ctx context.Context) *hostIPTables {
	b := *h
	b.ctx, b.lockEnd = ctx, time.Now().Add(host.DefaultLockWait)
	if deadline, ok := ctx.Deadline(); ok {
		b.lockEnd = deadline
	}
	return &b
}

// List implements IPTables.
func (h *hostIPTables) List(table, chain string) ([]string, error) {
	if h.ctx == nil {
		rules, err := h.IPTables.List(table, chain)
		return rules, lockFailure(err)
	}
	out, err := h.iptables("-t", table, "-S", chain)
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n"), nil
}

// Delete implements IPTables.
func (h *hostIPTables) Delete(table, chain string, rulespec ...string) error {
	if h.ctx == nil {
		return lockFailure(h.IPTables.Delete(table, chain, rulespec...))
	}
	_, err := h.iptables(append([]string{"-t", table, "-D", chain}, rulespec...)...)
	return err
}

// ClearAndDeleteChain implements IPTables: flush, then delete; a chain
// that is not there is no error.
func (h *hostIPTables) ClearAndDeleteChain(table, chain string) error {
	if h.ctx == nil {
		return lockFailure(h.IPTables.ClearAndDeleteChain(table, chain))
	}
	for _, op := range []string{"-F", "-X"} {
		if _, err := h.iptables("-t", table, op, chain); err != nil {
			if IsNotExist(err) {
				return nil
			}
			return err
		}
	}
	return nil
}

// lockFailure wraps a go-iptables error that says the lock could not be
// had in ErrXtablesLock.
func lockFailure(err error) error {
	if err != nil && mentionsLock(err.Error()) {
		return fmt.Errorf("%w: %s: %w", host.ErrXtablesLock, lockFile(), err)
	}
	return err
}

// SaveAll implements Saver.
func (h *hostIPTables) SaveAll() (map[string][]string, error) {
	if h.save == "" {
		return nil, errors.New("iptables-save not found")
	}
	out, err := h.command(h.save, nil, false) // iptables-save takes no lock, and has no -w
	if err != nil {
		return nil, err
	}
	return SaveToListings(out), nil
}

// ListTable implements TableLister.
func (h *hostIPTables) ListTable(table string) ([]string, error) {
	out, err := h.iptables("-t", table, "-S")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(out, "\n"), "\n"), nil
}

// RestoreNoFlush implements Restorer: one transaction, so either every
// line took effect or none did.
func (h *hostIPTables) RestoreNoFlush(table string, lines []string) error {
	if h.restore == "" {
		return errors.New("iptables-restore not found")
	}
	in := fmt.Sprintf("*%s\n%s\nCOMMIT\n", table, strings.Join(lines, "\n"))
	_, err := h.command(h.restore, []byte(in), true, "--noflush")
	return err
}

func (h *hostIPTables) iptables(args ...string) (string, error) {
	return h.command(h.list, nil, true, args...)
}

// command runs bin under h's context (context.Background and
// DefaultLockWait unbound). takesLock says bin waits for the xtables lock:
// it is told how long it may (-w), and a failure to have the lock is an
// ErrXtablesLock error naming it.
func (h *hostIPTables) command(bin string, stdin []byte, takesLock bool, args ...string) (string, error) {
	ctx, lockEnd := h.ctx, h.lockEnd
	if ctx == nil {
		ctx, lockEnd = context.Background(), time.Now().Add(host.DefaultLockWait)
	}
	if takesLock {
		args = append(args, "-w", strconv.Itoa(lockWaitSeconds(time.Now(), lockEnd)))
	}
	cmdline := filepath.Base(bin) + " " + strings.Join(args, " ")
	locking := takesLock && h.locking
	if err := ctx.Err(); err != nil {
		return "", ctxEndedError(cmdline, false, 0, err, locking, h.holder)
	}
	start := time.Now()
	out, stderr, err := h.run(ctx, bin, stdin, args...)
	if err == nil {
		return out, nil
	}
	waited := time.Since(start)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return "", ctxEndedError(cmdline, true, waited, ctxErr, locking, h.holder)
	}
	msg := strings.TrimSpace(stderr)
	if takesLock && mentionsLock(msg) {
		return "", lockWaitError(cmdline, waited, h.holder, msg)
	}
	return "", fmt.Errorf("%s: %w: %s", cmdline, err, msg)
}

// runCommand is the commandRunner that runs commands on the host; one
// killed by ctx is waited for no more than a second.
func runCommand(ctx context.Context, bin string, stdin []byte, args ...string) (string, string, error) {
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Stdout, cmd.Stderr = &out, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	return out.String(), stderr.String(), err
}
