package iptables

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/fakeipt"
)

// capturedLockMessages returns what iptables 1.8.9 printed when it could
// not have the lock, by command (testdata/iptables/xtables-lock.txt).
func capturedLockMessages(t *testing.T) map[string]string {
	t.Helper()
	msgs, err := fakeipt.LockMessages("../../testdata/iptables/xtables-lock.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 6 {
		t.Fatalf("%d captured messages, want 6", len(msgs))
	}
	return msgs
}

func TestIptablesOwnLockMessagesAreNeverAbsence(t *testing.T) {
	for cmd, msg := range capturedLockMessages(t) {
		t.Run(cmd, func(t *testing.T) {
			if !mentionsLock(msg) {
				t.Errorf("mentionsLock(%q) = false", msg)
			}
			wrapped := fmt.Errorf("running [%s]: exit status 4: %s", cmd, msg)
			if IsNotExist(wrapped) || IsNotExist(notExistError{wrapped.Error()}) {
				t.Errorf("IsNotExist(%q) = true: a rule behind a held lock would be counted as gone", msg)
			}
			if !errors.Is(lockFailure(wrapped), host.ErrXtablesLock) {
				t.Errorf("go-iptables' error %q is not ErrXtablesLock", msg)
			}
		})
	}
}

func TestLockWaitSecondsEndsByTheDeadlineAndNeverAsksToWaitForever(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		left time.Duration
		want int
	}{
		{"whole seconds left are waited, rounded down", 4900 * time.Millisecond, 4},
		{"DefaultLockWait without a deadline", host.DefaultLockWait, 30},
		{"under a second left is one second: -w 0 would wait forever", 300 * time.Millisecond, 1},
		{"a deadline already past is one second too", -time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lockWaitSeconds(now, now.Add(tc.left)); got != tc.want {
				t.Errorf("lockWaitSeconds(%s) = %d, want %d", tc.left, got, tc.want)
			}
		})
	}
}

func TestFlockHolderReadsProcLocks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		locks   string
		pid     int
		holding bool
	}{
		{"the holder of a write flock on the file", "1: FLOCK  ADVISORY  WRITE 2101 fe:00:9979673 0 EOF\n", 2101, true},
		{"a waiter is not the holder", "1: -> FLOCK  ADVISORY  WRITE 2102 fe:00:9979673 0 EOF\n", 0, false},
		{"a lock on another file", "1: FLOCK  ADVISORY  WRITE 2101 fe:00:9979674 0 EOF\n", 0, false},
		{"a lock on the same inode of another device", "1: FLOCK  ADVISORY  WRITE 2101 fe:01:9979673 0 EOF\n", 0, false},
		{"a POSIX lock is not iptables'", "1: POSIX  ADVISORY  WRITE 2101 fe:00:9979673 0 EOF\n", 0, false},
		{"the holder among others", "1: POSIX  ADVISORY  WRITE 7 00:1a:5 0 EOF\n2: FLOCK  ADVISORY  WRITE 2101 fe:00:9979673 0 EOF\n2: -> FLOCK  ADVISORY  WRITE 2102 fe:00:9979673 0 EOF\n", 2101, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid, holding := flockHolder(bufio.NewScanner(strings.NewReader(tc.locks)), 0xfe, 0, 9979673)
			if pid != tc.pid || holding != tc.holding {
				t.Errorf("flockHolder = %d, %v; want %d, %v", pid, holding, tc.pid, tc.holding)
			}
		})
	}
}

// newLegacy emulates iptables-legacy over tables, giving up on a held
// lock as iptables 1.8.9 did.
func newLegacy(t *testing.T, tables *fakes.IPTables) *fakeipt.Legacy {
	return fakeipt.NewLegacy(tables, capturedLockMessages(t)["iptables-legacy -w 1 -t nat -S POSTROUTING"])
}

// legacyHost is the default IPTables over the emulator.
func legacyHost(l *fakeipt.Legacy, locking bool) *hostIPTables {
	return NewEmulated(l.Run, locking, func(string) (int, bool) { return 4242, l.IsHeld() }).(*hostIPTables)
}

func TestLockWaitRanOutOnlyWhereTryingAgainCanFindTheLockFree(t *testing.T) {
	always := func(string) (int, bool) { return 4242, true }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, false},
		{"the wait ran out while the context ran", lockWaitError("iptables -t nat -S", time.Second, always,
			"Another app is currently holding the xtables lock. Stopped waiting after 1s."), true},
		{"the lock file could not be opened", lockWaitError("iptables -t nat -S", 0, always,
			"Fatal: can't open lock file /run/xtables.lock: Permission denied"), false},
		{"the context ended while the lock was held", ctxEndedError("iptables -t nat -S", true, time.Second,
			context.DeadlineExceeded, true, always), false},
		{"another failure", errors.New("iptables: No chain/target/match by that name."), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LockWaitRanOut(tc.err); got != tc.want {
				t.Errorf("LockWaitRanOut(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
