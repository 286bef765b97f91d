package iptables

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/seed1280861d/cninet/host"
)

// defaultLockFile is where iptables keeps its lock unless XTABLES_LOCKFILE
// names another file.
const defaultLockFile = "/run/xtables.lock"

// lockFile returns the lock file iptables uses in this process's
// environment, which its children inherit.
func lockFile() string {
	if f := os.Getenv("XTABLES_LOCKFILE"); f != "" {
		return f
	}
	return defaultLockFile
}

// lockWaitSeconds returns the -w argument that makes iptables give up
// waiting for the lock by end: whole seconds left, rounded down so that
// iptables says so itself before a deadline kills it, but at least 1:
// iptables 1.8.9 reads -w 0 (and no -w) as "wait for as long as it takes".
func lockWaitSeconds(now, end time.Time) int {
	if s := int(end.Sub(now) / time.Second); s > 1 {
		return s
	}
	return 1
}

// mentionsLock reports whether iptables' stderr says it could not have the
// lock (see testdata/iptables/xtables-lock.txt): it waited in vain, or it
// could not even open the lock file. Neither is ever an absent chain or
// rule, though the second contains "No such file or directory".
func mentionsLock(msg string) bool {
	return strings.Contains(msg, "holding the xtables lock") || strings.Contains(msg, "can't open lock file")
}

// flockHolder reads /proc/locks lines ("1: FLOCK  ADVISORY  WRITE 2101
// fe:00:9979673 0 EOF"; a waiter's has "->" after the number) for the
// holder of a write flock on the file (major:minor:inode).
func flockHolder(lines *bufio.Scanner, major, minor uint32, ino uint64) (int, bool) {
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, ino)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) < 6 || f[1] != "FLOCK" || f[3] != "WRITE" || f[5] != want {
			continue // "->" in f[1]: a waiter, not the holder
		}
		if pid, err := strconv.Atoi(f[4]); err == nil {
			return pid, true
		}
	}
	return 0, false
}

// lockWaitError is the error of a command that gave up waiting for the
// lock, or could not open it; msg is iptables' own stderr.
func lockWaitError(cmd string, waited time.Duration, holder func(string) (int, bool), msg string) error {
	return fmt.Errorf("%s: %w: %s%s, waited %s: %s", cmd, host.ErrXtablesLock, lockFile(), heldBy(holder), round(waited), msg)
}

// ctxEndedError is the error of a command that ctx stopped, before it
// started or while it ran. When the command takes the lock and the lock is
// held now, that is named as well, wrapped in ErrXtablesLock: it is why
// the command did not finish in time.
func ctxEndedError(cmd string, started bool, waited time.Duration, ctxErr error, locking bool, holder func(string) (int, bool)) error {
	what := "not run"
	if started {
		what = "stopped after " + round(waited).String()
	}
	if locking {
		if pid, held := holder(lockFile()); held {
			return fmt.Errorf("%s: %s: %w; %w: %s is held by pid %d", cmd, what, ctxErr, host.ErrXtablesLock, lockFile(), pid)
		}
	}
	return fmt.Errorf("%s: %s: %w", cmd, what, ctxErr)
}

func heldBy(holder func(string) (int, bool)) string {
	if pid, held := holder(lockFile()); held {
		return fmt.Sprintf(" held by pid %d", pid)
	}
	return ""
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }

// LockWaitRanOut reports whether err says only that an iptables command
// waited for the xtables lock in vain while its context still ran: the
// command changed nothing, and running it again may find the lock free.
// A lock file that cannot be opened, or a context that ended, is not
// that: trying again would meet the same.
func LockWaitRanOut(err error) bool {
	return err != nil && errors.Is(err, host.ErrXtablesLock) && !strings.Contains(err.Error(), "can't open lock file") &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
