package netsandbox

import (
	"os"
	"testing"

	"github.com/seed1280861d/cninet/internal/sandbox"
)

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
	if sandbox.Child() {
		if err := sandbox.Enter(); err != nil {
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
	code, err := sandbox.Reexec()
	if err != nil {
		unavailable = "entering a new network namespace: " + err.Error()
		return tests()
	}
	return code
}

// Run runs fn in a fresh network and mount namespace, for programs (the
// benchmark) rather than tests: see sandbox.Run.
func Run(fn func() int) (int, error) {
	code, err := sandbox.Run(fn)
	if err == nil && sandbox.Child() {
		unavailable = ""
	}
	return code, err
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
