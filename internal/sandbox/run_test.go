package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestAProcessInItsParentsNamespacesIsNotFresh(t *testing.T) {
	if err := FreshNamespaces(os.Getpid()); err == nil {
		t.Fatal("a process is fresh against itself")
	}
	if os.Getenv(childHelper) == "" { // a test binary run by go test shares go's namespaces
		if err := FreshNamespaces(os.Getppid()); err == nil || !strings.Contains(err.Error(), "shares its parent's net namespace") {
			t.Fatalf("against the parent: %v, want a refusal naming the net namespace", err)
		}
	}
}

// childHelper marks the test binary re-run by
// TestTheMarkerAloneMountsNothing.
const childHelper = "CNINET_SANDBOX_TEST_CHILD"

// TestTheMarkerAloneMountsNothing runs this test binary again with the
// marker set, in a new mount namespace but its parent's network
// namespace (so that, were the guard broken, its mounts would stay in a
// namespace of its own): Run must refuse, and never call fn.
func TestTheMarkerAloneMountsNothing(t *testing.T) {
	if os.Getenv(childHelper) == "1" {
		code, err := Run(func() int { fmt.Println("fn ran"); return 0 })
		fmt.Printf("code %d err %v\n", code, err)
		return
	}
	if os.Geteuid() != 0 {
		skipUnlessCI(t, "needs root (a new mount namespace)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTheMarkerAloneMountsNothing$", "-test.v")
	cmd.Env = append(os.Environ(), Marker+"=1", childHelper+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "fn ran") || !strings.Contains(string(out), "shares its parent's net namespace") {
		t.Fatalf("with the marker in its parent's network namespace, Run said:\n%s\nwant a refusal, fn never called", out)
	}
}

// skipUnlessCI skips t with reason, or fails it when CI=true: CI runs
// every test, as root, and a skip there would pass what did not run.
func skipUnlessCI(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("cannot run (CI=true forbids skipping): %s", reason)
	}
	t.Skip(reason)
}
