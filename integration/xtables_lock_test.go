package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"golang.org/x/sys/unix"
)

// legacyEnv marks the test process that runs a scenario on
// iptables-legacy; its value is the directory of the legacy binaries.
const legacyEnv = "CNINET_IT_IPTABLES_LEGACY"

// The xtables lock is real only where iptables-legacy runs: iptables-nft,
// this host's default, never takes it. So the scenario runs in a test
// process of its own, in a network and mount namespace of its own, whose
// PATH finds iptables-legacy under every iptables name (the plugins and
// the cleaner alike look iptables up in PATH) and whose XTABLES_LOCKFILE
// is a file of the test's: the lock it holds is nobody else's, and
// iptables-legacy's tables die with the namespace.
func TestTeardownWhileTheXtablesLockIsHeldEndsByItsDeadlineAndTheNextLeavesNothing(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		dir := os.Getenv(legacyEnv)
		if dir == "" {
			runOnIPTablesLegacy(t)
			return
		}
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "locked-1", Ports: []cninet.Port{{Value: 28090, To: 80}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		requireLegacyRules(t, base, nw)

		release := holdXtablesLock(t)
		const deadline = 4 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		err := c.Teardown(ctx, alloc, w.Path)
		took := time.Since(start)
		release()
		t.Logf("Teardown behind the held lock took %s: %v", took, err)
		if !errors.Is(err, cninet.ErrXtablesLock) || !errors.Is(err, cninet.ErrCleanupFailed) {
			t.Errorf("err = %v, want ErrXtablesLock within ErrCleanupFailed", err)
		}
		if !strings.Contains(fmt.Sprint(err), os.Getenv("XTABLES_LOCKFILE")) {
			t.Errorf("err = %v, want it to name the lock file", err)
		}
		if took > deadline+5*time.Second {
			t.Errorf("Teardown took %s on a %s deadline", took, deadline)
		}

		// The plugins' own iptables, orphaned when DEL was killed, finish
		// now that the lock is free; then Teardown finishes the rest.
		waitForExit(t, dir)
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatalf("Teardown after the lock was released: %v", err)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

// Setup behind a held lock: the ADD waits until the caller's deadline
// kills it, the rollback until its own (30s); Setup then says what it
// could not roll back. The plugins' iptables orphaned by those kills
// finish once the lock is free, and a Teardown leaves nothing: the
// rollback kept the reservation that proves the address.
func TestSetupWhileTheXtablesLockIsHeldEndsByItsRollbackDeadlineAndTeardownLeavesNothing(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		dir := os.Getenv(legacyEnv)
		if dir == "" {
			runOnIPTablesLegacy(t)
			return
		}
		nw := newNetwork(t, set, false)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "locked-2", Ports: []cninet.Port{{Value: 28091, To: 80}}}

		release := holdXtablesLock(t)
		const deadline, rollback = 3 * time.Second, 30 * time.Second
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		_, err := c.Setup(ctx, alloc, w.Path)
		took := time.Since(start)
		release()
		t.Logf("Setup behind the held lock took %s: %v", took, err)
		for _, want := range []error{cninet.ErrSetupFailed, cninet.ErrCleanupFailed, cninet.ErrXtablesLock} {
			if !errors.Is(err, want) {
				t.Errorf("err = %v, want it to wrap %v", err, want)
			}
		}
		if took > deadline+rollback+5*time.Second {
			t.Errorf("Setup took %s on a %s deadline and a %s rollback", took, deadline, rollback)
		}

		waitForExit(t, dir)
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatalf("Teardown after the lock was released: %v", err)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

// runOnIPTablesLegacy runs the calling subtest again in a process of its
// own (see above) and fails as it fails.
func runOnIPTablesLegacy(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore"} {
		legacy, err := exec.LookPath(strings.Replace(name, "tables", "tables-legacy", 1))
		if err != nil {
			netsandbox.Unavailable(t, "iptables-legacy is not installed: "+err.Error())
		}
		if err := os.Symlink(legacy, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command("/proc/self/exe", "-test.run", strings.Join(parts, "/"), "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), legacyEnv+"="+dir, "PATH="+dir+string(filepath.ListSeparator)+os.Getenv("PATH"),
		"XTABLES_LOCKFILE="+filepath.Join(t.TempDir(), "xtables.lock"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Log(out.String())
	switch {
	case err != nil:
		t.Fatalf("on iptables-legacy: %v", err)
	case strings.Contains(out.String(), "--- SKIP: "+t.Name()):
		netsandbox.Unavailable(t, "skipped on iptables-legacy")
	case !strings.Contains(out.String(), "--- PASS: "+t.Name()):
		t.Fatal("the scenario did not run on iptables-legacy")
	}
}

// requireLegacyRules fails unless the plugins' rules are in
// iptables-legacy's tables (which the snapshot reads through PATH here):
// else the lock would hold nothing up.
func requireLegacyRules(t *testing.T, base netsandbox.Snapshot, nw network) {
	t.Helper()
	now, err := netsandbox.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range netsandbox.Leaks(base, now, nw.allowance()) {
		if strings.HasPrefix(item, "iptables ") || strings.Contains(item, "iptables filter") {
			return
		}
	}
	t.Fatal("the plugins wrote no iptables-legacy rule")
}

// holdXtablesLock takes the xtables lock as another tool would, with
// flock(2) on $XTABLES_LOCKFILE, until release is called.
func holdXtablesLock(t *testing.T) (release func()) {
	t.Helper()
	f, err := os.OpenFile(os.Getenv("XTABLES_LOCKFILE"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
			f.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// waitForExit waits until no process runs a binary from dir.
func waitForExit(t *testing.T, dir string) {
	t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if procs := running(dir); len(procs) == 0 {
			return
		} else if time.Now().Add(50 * time.Millisecond).After(end) {
			t.Fatalf("still running after a minute: %q", procs)
		}
	}
}

// running returns the command lines of processes whose program is in dir.
func running(dir string) []string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []string
	for _, p := range cmdlines {
		raw, err := os.ReadFile(p)
		if err == nil && bytes.HasPrefix(raw, []byte(dir+"/")) {
			found = append(found, strings.ReplaceAll(string(raw), "\x00", " "))
		}
	}
	return found
}
