package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// `make install DESTDIR=… PREFIX=/usr` stages the binaries, the shim in
// the CNI plugin dir with a link beside it to the installed cninet (which
// runs the shim's DEL when the daemon gives none an answer) and the
// units, with ExecStart pointing at the installed cninet, and nothing
// outside DESTDIR.
func TestMakeInstallIntoDestdir(t *testing.T) {
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is needed to test `make install` (scripts/install-deps.sh installs it): %v", err)
	}
	dest := t.TempDir()
	cmd := exec.Command(mk, "-C", "../..", "install", "DESTDIR="+dest, "PREFIX=/usr", "CNI_BIN_DIR=/usr/libexec/cni")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	want := []struct {
		path string
		mode os.FileMode
	}{
		{"usr/bin/cninet", 0o755},
		{"usr/libexec/cni/cninet-shim", 0o755},
		{"etc/systemd/system/cninet.service", 0o644},
		{"etc/systemd/system/cninet.socket", 0o644},
		{"etc/cninet/net.d", os.ModeDir | 0o755},
	}
	for _, w := range want {
		fi, err := os.Stat(filepath.Join(dest, w.path))
		if err != nil {
			t.Errorf("%s not installed: %v", w.path, err)
			continue
		}
		if fi.Mode() != w.mode {
			t.Errorf("%s has mode %v, want %v", w.path, fi.Mode(), w.mode)
		}
	}
	if link, err := os.Readlink(filepath.Join(dest, "usr/libexec/cni/cninet")); err != nil || link != "/usr/bin/cninet" {
		t.Errorf("cninet beside the shim links to %q (%v), want /usr/bin/cninet, where it is installed", link, err)
	}
	if out, err := exec.Command(filepath.Join(dest, "usr/bin/cninet"), "version").CombinedOutput(); err != nil {
		t.Errorf("the installed cninet does not run: %v\n%s", err, out)
	}
	service := unitKeys(t, filepath.Join(dest, "etc/systemd/system/cninet.service"))
	if exec := service["ExecStart"]; !strings.HasPrefix(exec, "/usr/bin/cninet daemon ") || !strings.Contains(exec, "--cni-path /usr/libexec/cni") {
		t.Errorf("installed ExecStart %q, want /usr/bin/cninet daemon with --cni-path /usr/libexec/cni", exec)
	}
}

// The units as shipped: the service is Type=notify with KillMode=mixed,
// activated by the socket it names, and gives the drain and the rollback
// time to finish before systemd kills it.
func TestTheUnitsAgree(t *testing.T) {
	service, socket := unitKeys(t, "cninet.service"), unitKeys(t, "cninet.socket")
	for key, want := range map[string]string{"Type": "notify", "KillMode": "mixed", "KillSignal": "SIGTERM", "Requires": "cninet.socket", "NotifyAccess": "main"} {
		if service[key] != want {
			t.Errorf("cninet.service %s=%q, want %q", key, service[key], want)
		}
	}
	for key, want := range map[string]string{"SocketMode": "0600", "DirectoryMode": "0700", "SocketUser": "root"} {
		if socket[key] != want {
			t.Errorf("cninet.socket %s=%q, want %q", key, socket[key], want)
		}
	}
	flag := func(name string) string {
		m := regexp.MustCompile(`--` + name + ` (\S+)`).FindStringSubmatch(service["ExecStart"])
		if m == nil {
			t.Fatalf("ExecStart has no --%s: %q", name, service["ExecStart"])
		}
		return m[1]
	}
	if flag("socket") != socket["ListenStream"] {
		t.Errorf("the daemon's --socket %q is not the socket unit's ListenStream %q", flag("socket"), socket["ListenStream"])
	}
	drain, err1 := time.ParseDuration(flag("drain-timeout"))
	rollback, err2 := time.ParseDuration(flag("rollback-timeout"))
	stop, err3 := strconv.Atoi(service["TimeoutStopSec"])
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("durations: %v %v %v", err1, err2, err3)
	}
	if time.Duration(stop)*time.Second <= drain+rollback {
		t.Errorf("TimeoutStopSec=%d is no longer than --drain-timeout %s plus --rollback-timeout %s: systemd would kill a rollback", stop, drain, rollback)
	}
}

// unitKeys reads a unit file's Key=Value lines (continuations joined).
func unitKeys(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	var pending string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if pending != "" {
			line = pending + " " + line
			pending = ""
		}
		if strings.HasSuffix(line, "\\") {
			pending = strings.TrimSpace(strings.TrimSuffix(line, "\\"))
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is no Key=Value line", path, line)
		}
		keys[k] = strings.Join(strings.Fields(v), " ")
	}
	return keys
}
