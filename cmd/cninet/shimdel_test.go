package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/thick"
	"github.com/seed1280861d/cninet/internal/thickwire"
)

// shimDelRecorder writes a plugin that logs each call and prints a
// result on ADD, and a delegate conflist of network web using it.
func shimDelRecorder(t *testing.T) (info thick.Info, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "calls.log")
	plugins, confs := filepath.Join(dir, "bin"), filepath.Join(dir, "delegates")
	for _, d := range []string{plugins, confs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME" >> %q
[ "$CNI_COMMAND" = DEL ] && [ -e %q ] && exec sleep 30
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}' ;;
ADD) echo '{"cniVersion":"1.0.0","ips":[{"address":"198.18.0.5/24"}]}' ;;
esac
`, log, filepath.Join(dir, shimDelHang))
	if err := os.WriteFile(filepath.Join(plugins, "recorder"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := `{"cniVersion":"1.0.0","name":"web","plugins":[{"type":"recorder"}]}`
	if err := os.WriteFile(filepath.Join(confs, "web.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return thick.Info{ConfDir: confs, CNIPath: []string{plugins}, CacheDir: filepath.Join(dir, "cache"), StateDir: filepath.Join(dir, "state")}, log
}

func useFakeTables(cfg *cninet.Config) {
	cfg.IPTables = func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil }
	cfg.NFTables = func() (host.NFTables, error) { return &fakes.NFTables{}, nil }
}

// shimDelHang is the file that, in the dir of shimDelRecorder's log,
// makes its plugin hang on DEL.
const shimDelHang = "hang-on-del"

// shimDelAttach makes the attachment c1/eth0 in network web, as the
// daemon does.
func shimDelAttach(t *testing.T, info thick.Info) {
	t.Helper()
	c, err := thick.NewConfigurator(info, hclog.NewNullLogger(), nil, useFakeTables)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// As the daemon serves the runtime's ADD: for the owner the shim's DEL
	// then names (shimDelRequest's).
	ctx := cninet.WithOwner(context.Background(), "cnitool")
	if _, err := c.Connect(ctx, &cninet.Allocation{ID: "c1"}, "web", "/proc/self/ns/net", cninet.ConnectOptions{IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.CachedResult("c1", "web", "eth0"); err != nil || res == nil {
		t.Fatalf("no cached result after the ADD: %v", err)
	}
}

// shimDelRequest is the DEL of c1/eth0 in web as the shim sends it.
func shimDelRequest(command string) string {
	return fmt.Sprintf(`{"command":%q,"containerID":"c1","netns":"/proc/self/ns/net","ifName":"eth0","path":"/opt/cni/bin","config":{"cniVersion":"1.1.0","name":"web","type":"cninet-shim"},"owner":"cnitool","protocol":%d}`,
		command, thickwire.ProtocolVersion)
}

// runShimDel runs `cninet shim-del` with stdin and the fake tables.
func runShimDel(stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	c := &cli{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, end: outcome{output: outputText}, tweaks: []func(*cninet.Config){useFakeTables}}
	code = c.run(append([]string{thickwire.ShimDelCommand}, args...))
	return code, out.String(), errOut.String()
}

// assertDelegateSaw wants the delegate to have seen a DEL of c1/eth0
// (or none, when want is false), and libcni's cached result gone (or
// still there).
func assertDelegateSaw(t *testing.T, info thick.Info, log string, want bool) {
	t.Helper()
	calls, _ := os.ReadFile(log)
	if got := strings.Contains(string(calls), "DEL c1 eth0"); got != want {
		t.Fatalf("the delegate saw %q; want a DEL of c1 eth0: %v", calls, want)
	}
	if !want {
		return
	}
	c, err := thick.NewConfigurator(info, nil, nil, useFakeTables)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if res, err := c.CachedResult("c1", "web", "eth0"); err != nil || res != nil {
		t.Fatalf("cached result after the DEL: %v, %v; want none", res, err)
	}
}

// With the daemon down, shim-del runs the DEL with the daemon's info
// file, prints nothing and exits 0.
func TestShimDelRunsTheDelWithTheDaemonsInfo(t *testing.T) {
	info, log := shimDelRecorder(t)
	shimDelAttach(t, info)
	socket := filepath.Join(t.TempDir(), "cninet.sock") // nobody listens
	if err := thick.WriteInfo(socket, info); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runShimDel(shimDelRequest("DEL"), "--socket", socket, "--why", "cninet daemon is unreachable")
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and nothing printed", code, stdout, stderr)
	}
	assertDelegateSaw(t, info, log, true)
}

// With the conf dir emptied since the ADD, shim-del runs the conflist
// the host registry recorded then.
func TestShimDelWithTheConflistGoneRunsTheRecordedOne(t *testing.T) {
	info, log := shimDelRecorder(t)
	shimDelAttach(t, info)
	conf := filepath.Join(info.ConfDir, "web.conflist")
	saved, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	if err := thick.WriteInfo(socket, info); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runShimDel(shimDelRequest("DEL"), "--socket", socket); code != 0 {
		t.Fatalf("exit %d: %s%s; want success", code, stdout, stderr)
	}
	if err := os.WriteFile(conf, saved, 0o644); err != nil { // for assertDelegateSaw's Configurator
		t.Fatal(err)
	}
	assertDelegateSaw(t, info, log, true)
}

// What shim-del refuses or fails is the runtime's CNI error on stdout,
// as the shim's own, with exit status 1, and runs nothing.
func TestShimDelFailuresAreCNIErrors(t *testing.T) {
	cases := []struct {
		name    string
		request string
		untrust bool
		code    uint
		says    []string
	}{
		{"an info file others may write is refused, naming it (code 102)", shimDelRequest("DEL"), true, thick.CodeCleanupFailed,
			[]string{"writable by group or others", "cninet-shim: the daemon is gone; the DEL run by cninet instead failed"}},
		{"a request that is not a DEL is refused (code 4)", shimDelRequest("ADD"), false, types.ErrInvalidEnvironmentVariables, []string{`"ADD", want DEL`}},
		{"a request that is no JSON is undecodable (code 6)", "{", false, types.ErrDecodingFailure, []string{"not a request object"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			info, log := shimDelRecorder(t)
			shimDelAttach(t, info)
			socket := filepath.Join(t.TempDir(), "cninet.sock")
			if err := thick.WriteInfo(socket, info); err != nil {
				t.Fatal(err)
			}
			if tc.untrust {
				if err := os.Chmod(thick.InfoPath(socket), 0o666); err != nil {
					t.Fatal(err)
				}
			}
			code, stdout, stderr := runShimDel(tc.request, "--socket", socket, "--why", "the daemon is gone")
			var cerr types.Error
			if err := json.Unmarshal([]byte(stdout), &cerr); err != nil || code != 1 || cerr.Code != tc.code {
				t.Fatalf("exit %d, stdout %q (%v), stderr %q; want 1 and a CNI error of code %d", code, stdout, err, stderr, tc.code)
			}
			for _, s := range tc.says {
				if !strings.Contains(cerr.Msg, s) {
					t.Errorf("message %q does not say %q", cerr.Msg, s)
				}
			}
			assertDelegateSaw(t, info, log, false)
		})
	}
}

// shim-del's DEL ends at its --timeout (the shim config's "timeout",
// which the shim gives it), not at a fixed bound of its own: a plugin
// that hangs is cut short there, and cninet's force cleanup removes what
// it left, as a DEL through the daemon would.
func TestShimDelEndsAtItsTimeout(t *testing.T) {
	info, log := shimDelRecorder(t)
	shimDelAttach(t, info)
	if err := os.WriteFile(filepath.Join(filepath.Dir(log), shimDelHang), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	if err := thick.WriteInfo(socket, info); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var code int
	var stdout, stderr string
	go func() {
		defer close(done)
		code, stdout, stderr = runShimDel(shimDelRequest("DEL"), "--socket", socket, "--timeout", "500ms", "--why", "the daemon is gone")
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // the plugin hangs 30s
		t.Fatal("shim-del still runs 20s after its --timeout of 500ms")
	}
	if code != 0 || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want the DEL done by the force cleanup", code, stdout, stderr)
	}
	assertDelegateSaw(t, info, log, true)
}

// --timeout is a duration above zero.
func TestShimDelWantsATimeoutAboveZero(t *testing.T) {
	for _, timeout := range []string{"0s", "-1s"} {
		t.Run(timeout, func(t *testing.T) {
			if code, _, stderr := runShimDel(shimDelRequest("DEL"), "--socket", "/run/cninet/cninet.sock", "--timeout", timeout); code != exitUsage || !strings.Contains(stderr, "want a duration above zero") {
				t.Errorf("exit %d (%s), want a usage error", code, stderr)
			}
		})
	}
}

func TestShimDelWantsACleanAbsoluteSocket(t *testing.T) {
	for _, socket := range []string{"", "run/cninet.sock", "/run/cninet/../cninet.sock"} {
		t.Run(socket, func(t *testing.T) {
			if code, _, stderr := runShimDel(shimDelRequest("DEL"), "--socket", socket); code != exitUsage || !strings.Contains(stderr, "want the clean absolute path") {
				t.Errorf("exit %d (%s), want a usage error", code, stderr)
			}
		})
	}
}
