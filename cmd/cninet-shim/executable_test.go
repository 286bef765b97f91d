package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// otherUser is a uid other than root's and the test's (nobody).
const otherUser = 65534

// The shim runs as root the cninet it finds: it opens it only when
// nobody but root (or the shim's user) could have put it there, along
// the whole path, symbolic links followed.
func TestOpenExecutableTrustsOnlyRootsPath(t *testing.T) {
	if os.Geteuid() == otherUser {
		t.Fatalf("the test runs as uid %d, which it uses as another user", otherUser)
	}
	// Each layout is made under root, a directory of the test (0700,
	// root's, in /tmp: sticky); it returns the path to open. want is
	// what the refusal says ("": none).
	cases := []struct {
		name   string
		layout func(t *testing.T, root string) string
		want   string
	}{
		{"a cninet of root in root's directories is opened", func(t *testing.T, root string) string {
			return executable(t, root, "bin/cninet")
		}, ""},
		{"one in a sticky directory others may write (as /tmp) is opened, being root's", func(t *testing.T, root string) string {
			p := executable(t, root, "shared/cninet")
			chmod(t, filepath.Join(root, "shared"), fs.ModeSticky|0o777)
			return p
		}, ""},
		{"one in a directory others may write is refused, naming it", func(t *testing.T, root string) string {
			p := executable(t, root, "open/cninet")
			chmod(t, filepath.Join(root, "open"), 0o777)
			return p
		}, "/open is writable by group or others and not sticky (mode 777)"},
		{"one below a directory its group may write is refused, naming it", func(t *testing.T, root string) string {
			p := executable(t, root, "group/bin/cninet")
			chmod(t, filepath.Join(root, "group"), 0o775)
			return p
		}, "/group is writable by group or others and not sticky (mode 775)"},
		{"one below a directory another user owns is refused, naming it", func(t *testing.T, root string) string {
			p := executable(t, root, "theirs/bin/cninet")
			chown(t, filepath.Join(root, "theirs"))
			return p
		}, "/theirs is owned by uid 65534, want root"},
		{"one another user owns is refused", func(t *testing.T, root string) string {
			p := executable(t, root, "bin/cninet")
			chown(t, p)
			return p
		}, "/bin/cninet is owned by uid 65534, want root"},
		{"one others may write is refused", func(t *testing.T, root string) string {
			p := executable(t, root, "bin/cninet")
			chmod(t, p, 0o757)
			return p
		}, "/bin/cninet is writable by group or others (mode 757)"},
		{"a link to it, as make install leaves one beside the shim, is followed", func(t *testing.T, root string) string {
			executable(t, root, "usr/bin/cninet")
			return link(t, root, "cni/bin/cninet", filepath.Join(root, "usr/bin/cninet"))
		}, ""},
		{"a relative link up and down is followed", func(t *testing.T, root string) string {
			executable(t, root, "usr/bin/cninet")
			return link(t, root, "cni/bin/cninet", "../../usr/./bin/cninet")
		}, ""},
		{"a link in a directory others may write is refused", func(t *testing.T, root string) string {
			executable(t, root, "usr/bin/cninet")
			p := link(t, root, "open/cninet", filepath.Join(root, "usr/bin/cninet"))
			chmod(t, filepath.Join(root, "open"), 0o777)
			return p
		}, "/open is writable by group or others"},
		{"a link another user owns, in a sticky directory others may write, is refused", func(t *testing.T, root string) string {
			executable(t, root, "usr/bin/cninet")
			p := link(t, root, "shared/cninet", filepath.Join(root, "usr/bin/cninet"))
			chmod(t, filepath.Join(root, "shared"), fs.ModeSticky|0o777)
			chown(t, p)
			return p
		}, "/shared/cninet is owned by uid 65534, want root"},
		{"a link to a cninet in a directory others may write is refused, naming that directory", func(t *testing.T, root string) string {
			executable(t, root, "open/cninet")
			chmod(t, filepath.Join(root, "open"), 0o777)
			return link(t, root, "bin/cninet", filepath.Join(root, "open/cninet"))
		}, "/open is writable by group or others"},
		{"a directory on the way that is a link to one others may write is refused", func(t *testing.T, root string) string {
			executable(t, root, "open/cninet")
			chmod(t, filepath.Join(root, "open"), 0o777)
			link(t, root, "bin", filepath.Join(root, "open"))
			return filepath.Join(root, "bin/cninet")
		}, "/open is writable by group or others"},
		{"a loop of links is refused", func(t *testing.T, root string) string {
			return link(t, root, "loop", filepath.Join(root, "loop"))
		}, "more than 40 symbolic links"},
		{"a directory is no cninet", func(t *testing.T, root string) string {
			executable(t, root, "bin/cninet/x")
			return filepath.Join(root, "bin/cninet")
		}, "is a directory"},
		{"a file on the way is no directory", func(t *testing.T, root string) string {
			return filepath.Join(executable(t, root, "bin/cninet"), "x")
		}, "/bin/cninet is not a directory"},
		{"a missing one is refused, naming it", func(t *testing.T, root string) string {
			return filepath.Join(root, "nothing/cninet")
		}, "/nothing: no such file or directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.layout(t, t.TempDir())
			fd, err := openExecutable(path)
			if err == nil {
				syscall.Close(fd)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("openExecutable(%s): %v, want it opened", path, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("openExecutable(%s): %v, want a refusal saying %q", path, err, tc.want)
			}
		})
	}
}

// What runs is the file that was checked, by its descriptor: one put in
// its place after the check does not run.
func TestWhatRunsIsWhatWasChecked(t *testing.T) {
	dir := t.TempDir()
	path, other := filepath.Join(dir, "cninet"), filepath.Join(dir, "other")
	for from, to := range map[string]string{"/bin/true": path, "/bin/false": other} {
		if err := copyFile(from, to); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := openExecutable(path)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := os.Rename(other, path); err != nil { // /bin/false in its place
		t.Fatal(err)
	}
	_, status, err := run(fd, []string{path}, nil, time.Now().Add(time.Minute))
	if err != nil || !status.Exited() || status.ExitStatus() != 0 {
		t.Fatalf("ran %v, exit status %d: want the checked /bin/true (0), not what took its place", err, status.ExitStatus())
	}
}

// executable writes an executable file of root at root/rel, making the
// directories on the way (0755).
func executable(t *testing.T, root, rel string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// link makes the symbolic link root/rel to target.
func link(t *testing.T, root, rel, target string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func chmod(t *testing.T, p string, mode fs.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// chown gives p (a symbolic link itself) to another user; only root can.
func chown(t *testing.T, p string) {
	t.Helper()
	if os.Geteuid() != 0 {
		netsandbox.Unavailable(t, "needs root: giving a file to another user")
	}
	if err := os.Lchown(p, otherUser, otherUser); err != nil {
		t.Fatal(err)
	}
}

// A refusal for want of the file keeps the system's reason, so that
// errors.Is tells a missing cninet from one the shim may not run.
func TestOpenExecutableOfNothingIsENOENT(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nothing", "cninet")
	fd, err := openExecutable(path)
	if err == nil {
		syscall.Close(fd)
	}
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "/nothing: no such file or directory") {
		t.Fatalf("openExecutable(%s): %v, want ENOENT naming the missing directory", path, err)
	}
}
