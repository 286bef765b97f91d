package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/thick"
	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The cninet the shim runs its DEL with must be an executable it can
// run by its descriptor, not a script (whose interpreter would open the
// descriptor's /proc/self/fd path after the exec closed it). So a fake
// cninet is this test binary, run as "cninet": it runs the shell script
// fake.sh beside the name it was run by.

// fakeCninetName is the name this test binary, run by it, runs fake.sh as.
const fakeCninetName = "cninet"

// runFakeCninet runs, as a fake cninet, the fake.sh beside argv[0].
func runFakeCninet() {
	script := filepath.Join(filepath.Dir(os.Args[0]), "fake.sh")
	err := syscall.Exec("/bin/sh", append([]string{"sh", script}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "fake cninet: exec %s: %v\n", script, err)
	os.Exit(127)
}

// testBinaryCopy is a copy of this test binary in a directory of its
// own, made once: fake cninets link to it.
var testBinaryCopy = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "cninet-shim-test-")
	if err != nil {
		return "", err
	}
	copyDirs = append(copyDirs, dir)
	copied := filepath.Join(dir, "test-binary")
	return copied, copyFile(os.Args[0], copied)
})

// copyDirs are the directories TestMain removes at the end.
var copyDirs []string

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o755)
}

// fakeCninet puts a cninet into dir (a symbolic link to this test
// binary, as make install links cninet beside the shim) that records its
// arguments and stdin there and then does as script says (shell).
func fakeCninet(t *testing.T, dir, script string) (argv, stdin string) {
	t.Helper()
	binary, err := testBinaryCopy()
	if err != nil {
		t.Fatal(err)
	}
	argv, stdin = filepath.Join(dir, "argv"), filepath.Join(dir, "stdin")
	body := fmt.Sprintf("for a in \"$@\"; do echo \"$a\"; done > %q\ncat > %q\n%s\n", argv, stdin, script)
	if err := os.WriteFile(filepath.Join(dir, "fake.sh"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(dir, fakeCninetName)); err != nil {
		t.Fatal(err)
	}
	return argv, stdin
}

// ownCninet makes dir's fake cninet a file of its own instead of a link,
// for a test to change.
func ownCninet(t *testing.T, dir string) {
	t.Helper()
	cninet := filepath.Join(dir, fakeCninetName)
	binary, err := os.Readlink(cninet)
	if err == nil {
		err = os.Remove(cninet)
	}
	if err == nil {
		err = copyFile(binary, cninet)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A DEL the daemon does not answer (down, stopped, stalled) is run by
// the cninet next to the shim, `cninet shim-del`, with the request the
// daemon did not answer; the shim does not wait for the daemon.
func TestDelOnASilentDaemonRunsInCninet(t *testing.T) {
	daemons := append([]struct {
		name   string
		daemon silentDaemon
	}{{"a daemon that is down", func(t *testing.T) (string, <-chan struct{}) {
		return filepath.Join(t.TempDir(), "cninet.sock"), make(chan struct{})
	}}}, silentDaemons...)
	for _, tc := range daemons {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			argvFile, stdinFile := fakeCninet(t, dir, "exit 0")
			socket, released := tc.daemon(t)
			s := testShim(&strings.Builder{}, dir)
			s.answerGrace = 50 * time.Millisecond
			s.cninetGrace = 30 * time.Second // cninet (this test binary, then sh) may start slowly under load
			if err := within(t, func() error { return s.del(cmdArgsWithin(socket, "1.1.0", "200ms")) }); err != nil {
				t.Fatal(err)
			}
			select {
			case <-released:
				t.Fatal("the DEL returned only once the daemon was released")
			default:
			}
			argv, _ := os.ReadFile(argvFile)
			lines := strings.Split(strings.TrimSpace(string(argv)), "\n")
			if len(lines) != 4 || lines[0] != thickwire.ShimDelCommand || lines[1] != "--socket="+socket || lines[2] != "--timeout=200ms" ||
				!strings.HasPrefix(lines[3], "--why=cninet daemon at "+socket) {
				t.Fatalf("cninet ran with %q, want shim-del --socket=%s --timeout=200ms --why=<why>", lines, socket)
			}
			stdin, _ := os.ReadFile(stdinFile)
			req, _, err := thick.DecodeRequest(bytes.NewReader(stdin))
			if err != nil || req.Command != "DEL" || req.ContainerID != "c1" || req.IfName != "eth0" || req.Owner != "cnitool" {
				t.Fatalf("cninet got %s (%v), want the DEL of c1 eth0 as the daemon reads it", stdin, err)
			}
		})
	}
}

// cninet's answer is the runtime's; a cninet that cannot run, or ends
// without a CNI error, is code 102 saying so.
func TestTheDelInCninetAnswersTheRuntime(t *testing.T) {
	cases := []struct {
		name   string
		script string
		mode   os.FileMode
		code   uint
		says   string
	}{
		{"cninet's CNI error passes unchanged", `printf '{"code": 7, "msg": "no such network"}'; exit 1`, 0o755, 7, "no such network"},
		{"an exit without a CNI error is code 102, naming how it ended", "echo oops; exit 3", 0o755, thickwire.CodeCleanupFailed, "exited with status 3 without a CNI error"},
		{"a kill is code 102, naming the signal", "kill -9 $$", 0o755, thickwire.CodeCleanupFailed, "killed by signal 9"},
		{"a cninet others may write is not run: code 102", "exit 0", 0o775, thickwire.CodeCleanupFailed, "writable by group or others"},
		{"a cninet that is not executable is not run: code 102", "exit 0", 0o644, thickwire.CodeCleanupFailed, "is not executable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			argv, _ := fakeCninet(t, dir, tc.script)
			ownCninet(t, dir)
			if err := os.Chmod(filepath.Join(dir, "cninet"), tc.mode); err != nil {
				t.Fatal(err)
			}
			socket := filepath.Join(t.TempDir(), "cninet.sock") // nobody listens
			var cerr *cniError
			err := testShim(&strings.Builder{}, dir).del(cmdArgs(socket, "1.1.0"))
			if !errors.As(err, &cerr) || cerr.Code != tc.code || !strings.Contains(cerr.Error(), tc.says) {
				t.Fatalf("got %v, want code %d saying %q", err, tc.code, tc.says)
			}
			if _, err := os.Stat(argv); (err == nil) != (tc.mode&0o111 != 0 && tc.mode&0o022 == 0) {
				t.Errorf("cninet ran: %v; want it run only when it may be", err == nil)
			}
		})
	}
}

// cninet is the one the config's "cninet" names, else the one next to
// the shim; one that is missing is code 102 saying where it was looked
// for and how to install it.
func TestTheDelFindsCninet(t *testing.T) {
	named, next := t.TempDir(), t.TempDir()
	fakeCninet(t, named, "exit 0")
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	t.Run(`the config's "cninet" first`, func(t *testing.T) {
		args := cmdArgs(socket, "1.1.0")
		args.StdinData = []byte(strings.Replace(string(args.StdinData), `"name"`, `"cninet":"`+named+`/cninet","name"`, 1))
		if err := testShim(&strings.Builder{}, next).del(args); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(named, "argv")); err != nil {
			t.Fatal("the named cninet did not run")
		}
	})
	t.Run("none next to the shim is code 102, naming where and how", func(t *testing.T) {
		var cerr *cniError
		err := testShim(&strings.Builder{}, next).del(cmdArgs(socket, "1.1.0"))
		if !errors.As(err, &cerr) || cerr.Code != thickwire.CodeCleanupFailed || !strings.Contains(cerr.Msg, next+"/cninet") ||
			!strings.Contains(cerr.Msg, "next to cninet-shim") || !strings.Contains(cerr.Msg, "make install") || !strings.Contains(cerr.Msg, socket) {
			t.Fatalf("got %v", err)
		}
	})
}

// cninet runs within the config's "timeout", which it is given as its
// own (--timeout); one still running at it (and the grace for its
// answer after it) is killed and reaped, and the DEL is code 102 saying
// so, not a shim waiting for it without bound.
func TestTheDelInCninetIsKilledAtTheTimeout(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	// It sleeps past within's minute: only a kill ends it in time.
	argvFile, _ := fakeCninet(t, dir, "echo $$ > "+strconv.Quote(pidFile)+"; exec sleep 600")
	socket := filepath.Join(t.TempDir(), "cninet.sock") // nobody listens
	s := testShim(&strings.Builder{}, dir)
	s.cninetGrace = 3 * time.Second // time for cninet (this test binary, then sh) to start and say its pid, under load
	var cerr *cniError
	err := within(t, func() error { return s.del(cmdArgsWithin(socket, "1.1.0", "300ms")) })
	if !errors.As(err, &cerr) || cerr.Code != thickwire.CodeCleanupFailed ||
		!strings.Contains(cerr.Msg, `did not end within the shim config's "timeout" (300ms, and 3s more for its answer): killed`) {
		t.Fatalf("got %v, want code 102 saying cninet was killed at the timeout", err)
	}
	if argv, _ := os.ReadFile(argvFile); !strings.Contains(string(argv), "--timeout=300ms\n") {
		t.Errorf("cninet ran with %q, want --timeout=300ms", argv)
	}
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err := syscall.Kill(n, 0); err != syscall.ESRCH {
		t.Errorf("cninet (pid %d) is still there (kill 0: %v), want it killed and reaped", n, err)
	}
}

// The request reaches cninet whole, however big (more than a pipe
// holds), and all cninet prints is read, however much.
func TestTheDelInCninetGetsABigRequestWhole(t *testing.T) {
	dir := t.TempDir()
	_, stdinFile := fakeCninet(t, dir, `printf '{"code": 7, "msg": "done", "details": "'; head -c 200000 /dev/zero | tr '\0' x; printf '"}'; exit 1`)
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	args := cmdArgs(socket, "1.1.0")
	pad := strings.Repeat("p", 300<<10)
	args.StdinData = []byte(strings.Replace(string(args.StdinData), `"name"`, `"pad":"`+pad+`","name"`, 1))
	err := within(t, func() error { return testShim(&strings.Builder{}, dir).del(args) })
	var cerr *cniError
	if !errors.As(err, &cerr) || cerr.Code != 7 || len(cerr.Details) != 200000 {
		t.Fatalf("got %.200v, want cninet's code 7 and its 200000 bytes of details", err)
	}
	stdin, _ := os.ReadFile(stdinFile)
	if req, _, err := thick.DecodeRequest(bytes.NewReader(stdin)); err != nil || !bytes.Contains(req.Config, []byte(pad)) {
		t.Fatalf("cninet got %d bytes (%v), want the whole request", len(stdin), err)
	}
}
