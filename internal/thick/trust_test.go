package thick

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// nobody is the uid of a user other than root and this process.
const nobody = 65534

// chownNobody gives path to another user; only root can.
func chownNobody(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		netsandbox.Unavailable(t, "needs root: giving a file to another user")
	}
	if err := os.Lchown(path, nobody, nobody); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string, mode fs.FileMode) string {
	t.Helper()
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // exact, whatever the umask (sticky: fs.ModeSticky)
		t.Fatal(err)
	}
	return path
}

func TestListenSocketDirectory(t *testing.T) {
	cases := []struct {
		name string
		// dir makes the test's socket directory under base.
		dir func(t *testing.T, base string) string
		// refusal: words the error must hold; "" when Listen must succeed.
		refusal []string
	}{
		{"a missing directory and its missing parent are created 0700",
			func(t *testing.T, base string) string { return filepath.Join(base, "run", "cninet") }, nil},
		{"an existing private directory is used as it is",
			func(t *testing.T, base string) string { return mkdir(t, filepath.Join(base, "run"), 0o750) }, nil},
		{"a private directory inside a sticky shared one is used",
			func(t *testing.T, base string) string {
				return mkdir(t, filepath.Join(mkdir(t, filepath.Join(base, "tmp"), fs.ModeSticky|0o777), "run"), 0o700)
			}, nil},
		{"a root-owned symbolic link to a private directory is followed",
			func(t *testing.T, base string) string {
				target := mkdir(t, filepath.Join(base, "real"), 0o700)
				link := filepath.Join(base, "link")
				if err := os.Symlink(target, link); err != nil {
					t.Fatal(err)
				}
				return link
			}, nil},
		{"a shared sticky directory such as /tmp (1777) is refused, naming its mode",
			func(t *testing.T, base string) string {
				return mkdir(t, filepath.Join(base, "tmp"), fs.ModeSticky|0o777)
			},
			[]string{"mode 1777", "writable by group or others"}},
		{"a group-writable directory is refused",
			func(t *testing.T, base string) string { return mkdir(t, filepath.Join(base, "run"), 0o770) },
			[]string{"mode 0770"}},
		{"a directory writable by others is refused",
			func(t *testing.T, base string) string { return mkdir(t, filepath.Join(base, "run"), 0o757) },
			[]string{"mode 0757"}},
		{"a directory another user owns is refused, naming the owner",
			func(t *testing.T, base string) string {
				dir := mkdir(t, filepath.Join(base, "run"), 0o700)
				chownNobody(t, dir)
				return dir
			}, []string{"owned by uid 65534"}},
		{"a private directory inside a directory another user owns is refused: that user could swap it",
			func(t *testing.T, base string) string {
				parent := mkdir(t, filepath.Join(base, "home"), 0o755)
				chownNobody(t, parent)
				return mkdir(t, filepath.Join(parent, "run"), 0o700)
			}, []string{"owned by uid 65534", "above socket directory"}},
		{"a private directory inside a group-writable one that is not sticky is refused",
			func(t *testing.T, base string) string {
				return mkdir(t, filepath.Join(mkdir(t, filepath.Join(base, "shared"), 0o775), "run"), 0o700)
			}, []string{"mode 0775", "above socket directory"}},
		{"a symbolic link another user owns is refused",
			func(t *testing.T, base string) string {
				target := mkdir(t, filepath.Join(base, "real"), 0o700)
				link := filepath.Join(base, "link")
				if err := os.Symlink(target, link); err != nil {
					t.Fatal(err)
				}
				chownNobody(t, link)
				return link
			}, []string{"owned by uid 65534"}},
		{"a regular file in the directory's place is refused",
			func(t *testing.T, base string) string {
				path := filepath.Join(base, "run")
				if err := os.WriteFile(path, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return path
			}, []string{"not a directory"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t, t.TempDir())
			before, existed := modeOf(dir)
			l, err := Listen(filepath.Join(dir, "cninet.sock"))
			if tc.refusal == nil {
				if err != nil {
					t.Fatalf("Listen: %v", err)
				}
				l.Close()
				if !existed {
					assertMode(t, dir, 0o700)
					assertMode(t, filepath.Dir(dir), 0o700)
				}
			} else {
				if err == nil {
					l.Close()
					t.Fatalf("Listen in %s succeeded, want a refusal", dir)
				}
				if !errors.Is(err, ErrUntrustedPath) || !strings.Contains(err.Error(), dir) {
					t.Errorf("got %v, want ErrUntrustedPath naming %s", err, dir)
				}
				for _, word := range tc.refusal {
					if !strings.Contains(err.Error(), word) {
						t.Errorf("error %q does not say %q", err, word)
					}
				}
				if _, err := os.Lstat(filepath.Join(dir, "cninet.sock")); err == nil {
					t.Error("a socket was created in the refused directory")
				}
			}
			if after, _ := modeOf(dir); existed && after != before {
				t.Errorf("mode of %s changed from %v to %v", dir, before, after)
			}
		})
	}
}

// modeOf is path's mode, and whether it exists.
func modeOf(path string) (fs.FileMode, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	return fi.Mode(), true
}

func TestReadInfoTrustsOnlyRootsFiles(t *testing.T) {
	good := Info{ConfDir: "/etc/cninet/net.d", CNIPath: []string{"/opt/cni/bin"}, CacheDir: "/var/lib/cninet/cache", StateDir: "/var/lib/cninet"}
	cases := []struct {
		name string
		// socket writes the daemon's info (or not) and returns its socket.
		socket  func(t *testing.T, dir string) string
		refusal []string
	}{
		{"root's info file, 0600 in a private directory, is read",
			func(t *testing.T, dir string) string { return written(t, dir) }, nil},
		{"root's info file, 0644, is read: others may read it, not write it",
			func(t *testing.T, dir string) string { return chmodded(t, written(t, dir), 0o644) }, nil},
		{"an info file another user owns is refused",
			func(t *testing.T, dir string) string {
				socket := written(t, dir)
				chownNobody(t, InfoPath(socket))
				return socket
			}, []string{"owned by uid 65534"}},
		{"an info file writable by others is refused",
			func(t *testing.T, dir string) string { return chmodded(t, written(t, dir), 0o666) }, []string{"mode 0666"}},
		{"an info file writable by its group is refused",
			func(t *testing.T, dir string) string { return chmodded(t, written(t, dir), 0o620) }, []string{"mode 0620"}},
		{"an info file that is a symbolic link is refused",
			func(t *testing.T, dir string) string {
				socket := written(t, filepath.Join(dir, "elsewhere"))
				linked := filepath.Join(dir, "cninet.sock")
				if err := os.Symlink(InfoPath(socket), InfoPath(linked)); err != nil {
					t.Fatal(err)
				}
				return linked
			}, []string{"symbolic link"}},
		{"an info file in a group-writable directory is refused",
			func(t *testing.T, dir string) string {
				socket := written(t, dir)
				if err := os.Chmod(dir, 0o770); err != nil {
					t.Fatal(err)
				}
				return socket
			}, []string{"mode 0770"}},
		{"an info file in a directory another user owns is refused",
			func(t *testing.T, dir string) string {
				socket := written(t, dir)
				chownNobody(t, dir)
				return socket
			}, []string{"owned by uid 65534"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			socket := tc.socket(t, dir)
			info, found, err := ReadInfo(socket, []string{"/usr/lib/cni"})
			if tc.refusal == nil {
				if err != nil || !found || info.ConfDir != good.ConfDir || info.CNIPath[0] != good.CNIPath[0] {
					t.Fatalf("got %+v, %v, %v; want the info written", info, found, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrUntrustedPath) {
				t.Fatalf("got %+v, %v; want ErrUntrustedPath", info, err)
			}
			if len(info.CNIPath) != 0 || found {
				t.Errorf("a refused info file still gave %+v (found %v)", info, found)
			}
			for _, word := range tc.refusal {
				if !strings.Contains(err.Error(), word) {
					t.Errorf("error %q does not say %q", err, word)
				}
			}
		})
	}
	t.Run("without an info file, the defaults with the runtime's plugin path", func(t *testing.T) {
		info, found, err := ReadInfo(filepath.Join(t.TempDir(), "cninet.sock"), []string{"/usr/lib/cni"})
		if err != nil || found || info.ConfDir != DefaultConfDir || len(info.CNIPath) != 1 || info.CNIPath[0] != "/usr/lib/cni" {
			t.Fatalf("got %+v, %v, %v", info, found, err)
		}
	})
}

// written makes dir as the daemon does and writes its info there.
func written(t *testing.T, dir string) string {
	t.Helper()
	if err := PrepareSocketDir(dir); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "cninet.sock")
	if err := WriteInfo(socket, Info{ConfDir: "/etc/cninet/net.d", CNIPath: []string{"/opt/cni/bin"}, CacheDir: "/var/lib/cninet/cache"}); err != nil {
		t.Fatal(err)
	}
	return socket
}

func chmodded(t *testing.T, socket string, mode fs.FileMode) string {
	t.Helper()
	if err := os.Chmod(InfoPath(socket), mode); err != nil {
		t.Fatal(err)
	}
	return socket
}
