package netsandbox

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

const marker = "CNINET_NETSANDBOX"

// tmpfsDirs hide the host's CNI state and receive the sandbox's: netns
// mounts, host-local reservations (/run/cni) and libcni's cache.
var tmpfsDirs = []string{"/run/netns", "/run/cni", "/var/lib/cni", "/var/lib/cninet"}

// unavailable says why the sandbox could not be entered; "" inside it.
var unavailable = "netsandbox.Main was not called from TestMain"

// Main runs the tests inside a fresh network and mount namespace. As
// root it re-executes the test binary there and exits with its status;
// otherwise the tests run here and Require skips them.
func Main(m *testing.M) {
	code := run(m.Run)
	removeBuilt()
	os.Exit(code)
}

func run(tests func() int) int {
	if os.Getenv(marker) == "1" {
		if err := enter(); err != nil {
			unavailable = "preparing the sandbox: " + err.Error()
		} else {
			unavailable = ""
		}
		return tests()
	}
	if os.Geteuid() != 0 {
		unavailable = "integration tests need root (to create network namespaces)"
		return tests()
	}
	code, err := reexec()
	if err != nil {
		unavailable = "entering a new network namespace: " + err.Error()
		return tests()
	}
	return code
}

// Run runs fn in a fresh network and mount namespace, for programs (the
// cninet demo) rather than tests: as root it re-executes the binary there
// with the same arguments and returns its exit code; inside, it prepares
// the namespaces and runs fn. It fails when the namespaces cannot be had.
func Run(fn func() int) (int, error) {
	if os.Getenv(marker) == "1" {
		if err := enter(); err != nil {
			return 1, err
		}
		unavailable = ""
		return fn(), nil
	}
	if os.Geteuid() != 0 {
		return 1, fmt.Errorf("creating network namespaces needs root")
	}
	return reexec()
}

// reexec runs this binary again in new network and mount namespaces.
func reexec() (int, error) {
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), marker+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	err := cmd.Wait()
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// enter prepares the namespaces the process already runs in: mounts stop
// propagating to the host, tmpfs covers the CNI state directories, and the
// loopback interface comes up.
func enter() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	for _, dir := range tmpfsDirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mounting tmpfs on %s: %w", dir, err)
		}
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	return nil
}

// Inside reports whether the tests run in the sandbox.
func Inside() bool { return unavailable == "" }

// Require stops a test that must not run outside the sandbox: a skip with
// the reason, or a failure when CI=true (a skipped integration test must
// not pass CI).
func Require(t testing.TB) {
	t.Helper()
	if Inside() {
		return
	}
	Unavailable(t, unavailable)
}

// Unavailable skips t with reason, or fails it when CI=true.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("integration test cannot run (CI=true forbids skipping): %s", reason)
	}
	t.Skip(reason)
}
