package footprint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/fakeipt"
)

// capturedLockMessages returns what iptables 1.8.9 printed when it could
// not have the lock, by command (testdata/iptables/xtables-lock.txt).
func capturedLockMessages(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/iptables/xtables-lock.txt")
	if err != nil {
		t.Fatal(err)
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
	if len(msgs) != 6 {
		t.Fatalf("%d captured messages, want 6", len(msgs))
	}
	return msgs
}

// notExistError is go-iptables' error as it reads a message with "No such
// file or directory" in it: absent.
type notExistError struct{ msg string }

func (e notExistError) Error() string    { return e.msg }
func (e notExistError) IsNotExist() bool { return true }

func TestIptablesOwnLockMessagesAreNeverAbsence(t *testing.T) {
	for cmd, msg := range capturedLockMessages(t) {
		t.Run(cmd, func(t *testing.T) {
			if !mentionsLock(msg) {
				t.Errorf("mentionsLock(%q) = false", msg)
			}
			wrapped := fmt.Errorf("running [%s]: exit status 4: %s", cmd, msg)
			if isNotExist(wrapped) || isNotExist(notExistError{wrapped.Error()}) {
				t.Errorf("isNotExist(%q) = true: a rule behind a held lock would be counted as gone", msg)
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

func TestBoundHostIPTablesCommands(t *testing.T) {
	t.Setenv("XTABLES_LOCKFILE", "/run/test-xtables.lock")
	for _, tc := range []struct {
		name    string
		timeout time.Duration // 0: no deadline
		cancel  bool          // ctx ended before the call
		held    bool
		block   bool // the deadline comes before iptables gives up
		locking bool // the binary takes the lock (iptables-legacy)
		call    func(ipt host.IPTables) error
		want    []error // errors.Is
		says    []string
		ran     []string // command lines, exactly
	}{
		{
			name: "a listing waits for the lock until the deadline, in whole seconds", timeout: 7500 * time.Millisecond, locking: true,
			call: func(ipt host.IPTables) error { _, err := ipt.List("nat", "POSTROUTING"); return err },
			ran:  []string{"iptables -t nat -S POSTROUTING -w 7"},
		},
		{
			name: "without a deadline all waits together last DefaultLockWait", locking: true,
			call: func(ipt host.IPTables) error {
				return ipt.Delete("nat", "POSTROUTING", "-s", "198.18.0.2/32", "-j", "ACCEPT")
			},
			want: []error{errExit}, says: []string{"Bad rule"},
			ran: []string{"iptables -t nat -D POSTROUTING -s 198.18.0.2/32 -j ACCEPT -w 29"},
		},
		{
			name: "iptables giving up names the lock, the wait and the holder", timeout: 3 * time.Second, held: true, locking: true,
			call: func(ipt host.IPTables) error { _, err := ipt.List("nat", "POSTROUTING"); return err },
			want: []error{host.ErrXtablesLock}, says: []string{"/run/test-xtables.lock held by pid 4242", "waited", "Stopped waiting after 1s"},
			ran: []string{"iptables -t nat -S POSTROUTING -w 2"},
		},
		{
			name: "a batch refused for the lock is ErrXtablesLock", timeout: 3 * time.Second, held: true, locking: true,
			call: func(ipt host.IPTables) error {
				return ipt.(host.Restorer).RestoreNoFlush("nat", []string{"-F CNI-X", "-X CNI-X"})
			},
			want: []error{host.ErrXtablesLock}, says: []string{"iptables-restore --noflush -w 2"},
			ran: []string{"iptables-restore --noflush -w 2"},
		},
		{
			name: "a deadline before iptables gives up kills it and says the lock is held", timeout: 50 * time.Millisecond, held: true, block: true, locking: true,
			call: func(ipt host.IPTables) error { return ipt.ClearAndDeleteChain("nat", "CNI-X") },
			want: []error{host.ErrXtablesLock, context.DeadlineExceeded}, says: []string{"stopped after", "/run/test-xtables.lock is held by pid 4242"},
			ran: []string{"iptables -t nat -F CNI-X -w 1"},
		},
		{
			name: "a context already ended runs nothing", cancel: true, held: true, locking: true,
			call: func(ipt host.IPTables) error { _, err := ipt.List("nat", "POSTROUTING"); return err },
			want: []error{host.ErrXtablesLock, context.Canceled}, says: []string{"not run"},
		},
		{
			name: "on iptables-nft a killed command is the context's alone", timeout: 50 * time.Millisecond, held: true, block: true,
			call: func(ipt host.IPTables) error { _, err := ipt.List("nat", "POSTROUTING"); return err },
			want: []error{context.DeadlineExceeded}, ran: []string{"iptables -t nat -S POSTROUTING -w 1"},
		},
		{
			name: "iptables-save takes no lock and gets no -w", timeout: time.Minute, held: true, locking: true,
			call: func(ipt host.IPTables) error { _, err := ipt.(host.Saver).SaveAll(); return err },
			ran:  []string{"iptables-save "},
		},
		{
			name: "deleting a chain that is not there is no error and stops at the flush", timeout: time.Minute, locking: true,
			call: func(ipt host.IPTables) error { return ipt.ClearAndDeleteChain("nat", "CNI-NOPE") },
			ran:  []string{"iptables -t nat -F CNI-NOPE -w 59"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emu := newLegacy(t, fakeipt.New())
			emu.hold(tc.held, tc.block)
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
			}
			defer cancel()
			if tc.cancel {
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			err := tc.call(emu.host(tc.locking).WithContext(ctx))
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want it to wrap %v", err, want)
				}
			}
			if len(tc.want) == 0 && err != nil {
				t.Errorf("err = %v, want nil", err)
			}
			if tc.locking == false && errors.Is(err, host.ErrXtablesLock) {
				t.Errorf("err = %v: iptables-nft takes no lock", err)
			}
			for _, s := range tc.says {
				if !strings.Contains(fmt.Sprint(err), s) {
					t.Errorf("err = %v, want it to say %q", err, s)
				}
			}
			if ran := emu.commands(); !slices.Equal(ran, tc.ran) {
				t.Errorf("ran %q, want %q", ran, tc.ran)
			}
		})
	}
}

// TestCleanBehindAHeldLockChangesNothingAndTheNextCleanFinishes cleans
// alloc-1 of the captured two-attachment host through the host IPTables
// on an emulated iptables-legacy: while another process holds the lock,
// nothing is removed or reported removed, not even the reservation that
// proves alloc-1's address, and the error says why; once it is free, a
// second Clean removes alloc-1's chains, jumps and comment-less firewall
// rules (proven by that reservation) and leaves alloc-10's.
func TestCleanBehindAHeldLockChangesNothingAndTheNextCleanFinishes(t *testing.T) {
	var emus [2]*legacyIPTables
	for i, v := range []string{"ipv4", "ipv6"} {
		tables := fakeipt.New()
		for _, table := range []string{"nat", "filter"} {
			raw, err := os.ReadFile("../../testdata/iptables/dual-" + table + "-" + v + ".txt")
			if err != nil {
				t.Fatal(err)
			}
			tables.Load(table, string(raw))
		}
		emus[i] = newLegacy(t, tables)
	}
	hostTables := Host{IPTables: func(v6 bool) (host.IPTables, error) { return emus[b2i(v6)].host(true), nil }}
	net := Network{Name: "nomad", IfName: "eth0", IPAMDirs: []string{t.TempDir()}, CacheDir: t.TempDir()}
	reservation := filepath.Join(net.IPAMDirs[0], "198.18.0.2") // the proof of alloc-1's address
	if err := os.WriteFile(reservation, []byte("alloc-1\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	mine, theirs := Attachment{"nomad", "alloc-1"}, Attachment{"nomad", "alloc-10"}
	before := [2]string{emus[0].tables.Save("nat"), emus[1].tables.Save("nat")}

	for _, emu := range emus {
		emu.hold(true, false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := NewCleaner(ctx, net, hostTables)
	cl.Prevent([]string{mine.ID})
	removed, err := cl.Clean([]string{mine.ID})
	if !errors.Is(err, host.ErrXtablesLock) || len(removed) > 0 {
		t.Fatalf("behind a held lock: removed %d, err = %v; want nothing removed and ErrXtablesLock", len(removed), err)
	}
	for i, emu := range emus {
		if now := emu.tables.Save("nat"); now != before[i] {
			t.Errorf("%s nat changed behind a held lock:\n%s", familyName(i == 1), now)
		}
	}

	if _, err := os.Stat(reservation); err != nil {
		t.Errorf("the reservation went with the rules it proves still there: %v", err)
	}

	for _, emu := range emus {
		emu.hold(false, false)
	}
	cl = NewCleaner(context.Background(), net, hostTables)
	cl.Prevent([]string{mine.ID})
	if _, err := cl.Clean([]string{mine.ID}); err != nil {
		t.Fatalf("once the lock is free: %v", err)
	}
	if _, err := os.Stat(reservation); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the reservation is left once the rules are gone: %v", err)
	}
	for i, emu := range emus {
		for _, chain := range []string{mine.MasqChain(), mine.DNATChain()} {
			if emu.tables.HasChain("nat", chain) {
				t.Errorf("%s: %s of %s is left", familyName(i == 1), chain, mine.ID)
			}
		}
		if !emu.tables.HasChain("nat", theirs.MasqChain()) || !emu.tables.HasChain("nat", theirs.DNATChain()) {
			t.Errorf("%s: %s's chains were removed", familyName(i == 1), theirs.ID)
		}
		if v4 := i == 0; v4 && (mentions(emu.tables.Rules("filter", firewallChain), "198.18.0.2/32") ||
			!mentions(emu.tables.Rules("filter", firewallChain), "198.18.0.3/32")) {
			t.Errorf("CNI-FORWARD after the second Clean: %q, want alloc-10's rules only", emu.tables.Rules("filter", firewallChain))
		}
		if !slices.ContainsFunc(emu.commands(), func(c string) bool { return strings.HasPrefix(c, "iptables-restore --noflush -w ") }) {
			t.Errorf("%s: the deletions were not one iptables-restore: %q", familyName(i == 1), emu.commands())
		}
	}
}

func mentions(rules []string, s string) bool {
	return slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, s) })
}

func TestBindingKeepsEveryExtension(t *testing.T) {
	hostTables := &hostIPTables{list: "iptables", run: newLegacy(t, fakeipt.New()).run}
	for _, tc := range []struct {
		name   string
		ipt    host.ContextBinder
		probes bool
	}{
		{"iptables-legacy", hostTables, false},
		{"iptables-nft keeps its netlink probes", &nfIPTables{hostIPTables: hostTables, family: "ip"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound := tc.ipt.WithContext(context.Background())
			_, lists := bound.(host.TableLister)
			_, saves := bound.(host.Saver)
			_, restores := bound.(host.Restorer)
			_, binds := bound.(host.ContextBinder)
			if !lists || !saves || !restores || !binds {
				t.Errorf("bound: TableLister %v, Saver %v, Restorer %v, ContextBinder %v; want all", lists, saves, restores, binds)
			}
			_, probes := bound.(host.ChainProber)
			_, scans := bound.(host.AddrScanner)
			if probes != tc.probes || scans != tc.probes {
				t.Errorf("bound: ChainProber %v, AddrScanner %v; want %v", probes, scans, tc.probes)
			}
			if _, ok := bindContext(context.Background(), bound).(host.ChainProber); ok != tc.probes {
				t.Errorf("bound twice: ChainProber %v, want %v", ok, tc.probes)
			}
		})
	}
}

func TestCleanWithAnEndedContextRunsNothingAndKeepsTheProof(t *testing.T) {
	tables := fakeipt.New()
	raw, err := os.ReadFile("../../testdata/iptables/dual-nat-ipv4.txt")
	if err != nil {
		t.Fatal(err)
	}
	emu := newLegacy(t, tables.Load("nat", string(raw)))
	hostTables := Host{IPTables: func(bool) (host.IPTables, error) { return emu.host(true), nil }}
	net := Network{Name: "nomad", IfName: "eth0", IPAMDirs: []string{t.TempDir()}, CacheDir: t.TempDir()}
	reservation := filepath.Join(net.IPAMDirs[0], "198.18.0.2")
	if err := os.WriteFile(reservation, []byte("alloc-1\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cl := NewCleaner(ctx, net, hostTables)
	cl.Prevent([]string{"alloc-1"})
	removed, err := cl.Clean([]string{"alloc-1"})
	if !errors.Is(err, context.Canceled) || len(removed) > 0 {
		t.Errorf("removed %d, err = %v; want nothing removed and the context's error", len(removed), err)
	}
	if ran := emu.commands(); len(ran) > 0 {
		t.Errorf("ran %q after the context ended", ran)
	}
	if _, err := os.Stat(reservation); err != nil {
		t.Errorf("the reservation went with the rules it proves still there: %v", err)
	}
}
