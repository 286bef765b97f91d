package netsandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildCommand compiles the program of package pkg (a path such as
// ./cmd/cninet, relative to the repository root) once per test binary and
// returns the path of the binary, named name. It is removed when Main
// returns.
func BuildCommand(t testing.TB, name, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := "cmd:" + pkg
	if dir, ok := built[key]; ok {
		return filepath.Join(dir, name)
	}
	dir, err := os.MkdirTemp("", "cninet-cmd-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
	cmd.Dir = RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	built[key] = dir
	return filepath.Join(dir, name)
}
