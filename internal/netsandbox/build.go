package netsandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// RepoRoot is the directory holding go.mod, found upwards from here.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// built maps what was built (a plugin's name, or "cmd:" and a package)
// to the temporary directory holding it, until Main removes it.
var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// BuildPlugin compiles testdata/plugins/<name> (once per test binary) and
// returns the directory holding the binary, named <name>.
func BuildPlugin(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if dir, ok := built[name]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "cninet-plugin-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./testdata/plugins/"+name)
	cmd.Dir = RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building plugin %s: %v\n%s", name, err, out)
	}
	built[name] = dir
	return dir
}

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

// BuildShim compiles cmd/cninet-shim and cmd/cninet (once per test
// binary, as BuildCommand does) and returns the shim's path, with the
// cninet that runs the shim's own DEL beside it (a symbolic link to
// BuildCommand's cninet), as `make install` leaves them.
func BuildShim(t testing.TB) string {
	t.Helper()
	cninet := BuildCommand(t, "cninet", "./cmd/cninet")
	shim := BuildCommand(t, "cninet-shim", "./cmd/cninet-shim")
	beside := filepath.Join(filepath.Dir(shim), "cninet")
	buildMu.Lock()
	defer buildMu.Unlock()
	if err := os.Symlink(cninet, beside); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	return shim
}

// removeBuilt removes what BuildPlugin and BuildCommand built.
func removeBuilt() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for _, dir := range built {
		os.RemoveAll(dir)
	}
}
