package integration

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/thick"
)

// otherUser is the uid of a user other than root (nobody).
const otherUser = 65534

// The socket directory rule (docs/thick-mode.md#the-socket-directory), end
// to end with the real binaries, in a tmpfs of the test's own mount
// namespace: the cninet daemon refuses a socket directory others may write
// (a sticky shared one such as /tmp, 1777) or another user owns, naming it
// and leaving it as it was; a private directory it makes inside a sticky
// shared one serves cnitool through the shim, the shared one keeping its
// mode. The DEL cninet runs for the shim (daemon down) refuses an info file root does
// not own or others may write, naming it, and runs nothing until it is
// fixed.
func TestThickSocketDirectoryTrust(t *testing.T) {
	netsandbox.Require(t)
	set := netsandbox.PluginSets(t)[0]
	daemonBin := netsandbox.BuildCommand(t, "cninet", "./cmd/cninet")

	// shared is a directory like /tmp: world-writable and sticky, root's.
	newShared := func(t *testing.T) string {
		t.Helper()
		// Not under t.TempDir, whose long name would leave no room for
		// the socket's path (108 bytes at most).
		mnt, err := os.MkdirTemp("", "cninet-trust-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(mnt) })
		privateTmpfs(t, mnt)
		shared := filepath.Join(mnt, "shared")
		if err := os.Mkdir(shared, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(shared, fs.ModeSticky|0o777); err != nil { // exact, whatever the umask
			t.Fatal(err)
		}
		wantDir(t, shared, 0, fs.ModeSticky|0o777, "before the daemon")
		return shared
	}

	refusals := []struct {
		name string
		// socketDir makes the directory the daemon is given, under shared.
		socketDir func(t *testing.T, shared string) string
		// uid and mode the directory must keep; words the refusal holds.
		uid   uint32
		mode  fs.FileMode
		words []string
	}{
		{"a sticky world-writable directory (1777, as /tmp) is refused, naming it and its mode, and keeps its mode",
			func(t *testing.T, shared string) string { return shared },
			0, fs.ModeSticky | 0o777, []string{"mode 1777", "writable by group or others"}},
		{"a directory another user owns is refused, naming it and its owner, and keeps its owner",
			func(t *testing.T, shared string) string {
				dir := filepath.Join(shared, "theirs")
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(dir, otherUser, otherUser); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			otherUser, 0o700, []string{"owned by uid 65534", "want root"}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			shared := newShared(t)
			dir := tc.socketDir(t, shared)
			tmp := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a daemon that accepted the directory serves until killed
			defer cancel()
			out, err := exec.CommandContext(ctx, daemonBin, "daemon", "--socket", filepath.Join(dir, "cninet.sock"),
				"--conf-dir", filepath.Join(tmp, "delegates"), "--cache-dir", filepath.Join(tmp, "cache"),
				"--state-dir", filepath.Join(tmp, "state"), "--cni-path", set.Dir).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("cninet daemon: %v, want exit status 1 refusing %s:\n%s", err, dir, out)
			}
			want := append([]string{"untrusted path", "socket directory " + dir}, tc.words...)
			for _, w := range want {
				if !strings.Contains(string(out), w) {
					t.Fatalf("cninet daemon's refusal lacks %q:\n%s", w, out)
				}
			}
			wantDir(t, dir, tc.uid, tc.mode, "after the refusal")
			wantDir(t, shared, 0, fs.ModeSticky|0o777, "after the refusal")
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				t.Fatalf("the refused directory %s holds %d entries (socket or info file), want none", dir, len(entries))
			}
		})
	}

	t.Run("a private directory the daemon makes inside a sticky shared one serves the shim; the shared one keeps mode 1777", func(t *testing.T) {
		shared := newShared(t)
		own := filepath.Join(shared, "cninet")
		r := newThickRig(t, set, "1.1.0", false, func(r *thickRig) { r.socket = filepath.Join(own, "cninet.sock") })
		wantDir(t, own, 0, 0o700, "made by the daemon")
		wantDir(t, shared, 0, fs.ModeSticky|0o777, "with the daemon serving")
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		addResult(t, r.mustCnitool(portArgs(28401, 8080), "add", r.name(), w.Path), "1.1.0")
		r.mustCnitool(nil, "check", r.name(), w.Path)
		r.mustCnitool(portArgs(28401, 8080), "del", r.name(), w.Path)
		assertNoLeaks(t, base, r.nw.allowance())
		r.stop()
		wantDir(t, shared, 0, fs.ModeSticky|0o777, "after the daemon stopped")
	})

	t.Run("the DEL cninet runs for the shim refuses an info file that is not root's or that others may write, and runs nothing until it is fixed", func(t *testing.T) {
		r := newThickRig(t, set, "1.1.0", false)
		info := thick.InfoPath(r.socket)
		wantFile(t, info, 0, 0o600, "written by the daemon")
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		addResult(t, r.mustCnitool(portArgs(28402, 8080), "add", r.name(), w.Path), "1.1.0")
		attached := netsandbox.Leaks(base, snapshot(t), r.nw.allowance())
		if len(attached) == 0 {
			t.Fatal("the ADD left no trace on the host: the test could not tell a DEL that ran from one that did not")
		}
		r.kill() // the runtime's DEL now runs in cninet shim-del, with the info file
		dir := filepath.Dir(info)
		tampers := []struct {
			name         string
			tamper, undo func() error
			words        []string
		}{
			{"an info file another user owns",
				func() error { return os.Chown(info, otherUser, otherUser) }, func() error { return os.Chown(info, 0, 0) },
				[]string{"daemon's info file " + info + " is owned by uid 65534", "want root"}},
			{"an info file group and others may write",
				func() error { return os.Chmod(info, 0o666) }, func() error { return os.Chmod(info, 0o600) },
				[]string{"daemon's info file " + info + " has mode 0666", "writable by group or others"}},
			{"an info file in a directory others may write (1777)",
				func() error { return os.Chmod(dir, fs.ModeSticky|0o777) }, func() error { return os.Chmod(dir, 0o700) },
				[]string{"directory of the daemon's info file " + dir + " has mode 1777", "writable by group or others"}},
		}
		for _, tc := range tampers {
			if err := tc.tamper(); err != nil {
				t.Fatal(err)
			}
			out, errOut, err := r.cnitool(portArgs(28402, 8080), "del", r.name(), w.Path)
			if err == nil {
				t.Fatalf("%s: cnitool del succeeded, want the shim to refuse it:\n%s", tc.name, out)
			}
			for _, word := range append([]string{"untrusted path"}, tc.words...) {
				if !strings.Contains(errOut, word) {
					t.Fatalf("%s: cnitool del's error lacks %q:\n%s%s", tc.name, word, out, errOut)
				}
			}
			if cerr := r.shimError("DEL", "trust-1", w.Path); cerr.Code != 102 || !strings.Contains(cerr.Msg, tc.words[0]) {
				t.Fatalf("%s: the shim's DEL answered %+v, want code 102 naming it", tc.name, cerr)
			}
			if left := netsandbox.Leaks(base, snapshot(t), r.nw.allowance()); !sameItems(left, attached) {
				t.Fatalf("%s: the refused DEL changed the host: the attachment was\n  %s\nnow\n  %s", tc.name,
					strings.Join(attached, "\n  "), strings.Join(left, "\n  "))
			}
			if err := tc.undo(); err != nil {
				t.Fatal(err)
			}
		}
		// Root's, 0600, in a 0700 directory again: the DEL runs in the
		// shim and leaves nothing.
		wantFile(t, info, 0, 0o600, "restored")
		wantDir(t, dir, 0, 0o700, "restored")
		r.mustCnitool(portArgs(28402, 8080), "del", r.name(), w.Path)
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// wantDir fails t unless dir is a directory owned by uid with exactly
// mode's permission and sticky bits.
func wantDir(t *testing.T, dir string, uid uint32, mode fs.FileMode, when string) {
	t.Helper()
	fi := lstat(t, dir)
	if !fi.IsDir() {
		t.Fatalf("%s (%s): %s is not a directory", dir, when, fi.Mode())
	}
	wantOwnerMode(t, dir, fi, uid, mode, when)
}

// wantFile is wantDir for a regular file.
func wantFile(t *testing.T, path string, uid uint32, mode fs.FileMode, when string) {
	t.Helper()
	fi := lstat(t, path)
	if !fi.Mode().IsRegular() {
		t.Fatalf("%s (%s): %s is not a regular file", path, when, fi.Mode())
	}
	wantOwnerMode(t, path, fi, uid, mode, when)
}

func wantOwnerMode(t *testing.T, path string, fi fs.FileInfo, uid uint32, mode fs.FileMode, when string) {
	t.Helper()
	got := fi.Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetgid | fs.ModeSetuid)
	if got != mode {
		t.Fatalf("%s (%s) has mode %s, want %s", path, when, got, mode)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid {
		t.Fatalf("%s (%s) is owned by uid %d, want %d", path, when, st.Uid, uid)
	}
}

func lstat(t *testing.T, path string) fs.FileInfo {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// sameItems says whether a and b hold the same items, in any order.
func sameItems(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
