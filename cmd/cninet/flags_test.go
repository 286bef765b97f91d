package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// confDirOf writes a bridge network per name, each with its own bridge
// and subnet (198.18.210+i.0/24), into a new directory.
func confDirOf(t *testing.T, names ...string) string {
	t.Helper()
	dir, ipam := t.TempDir(), t.TempDir()
	for i, name := range names {
		conf, err := cninet.BridgeConfList(cninet.BridgeConfig{NetworkName: name, BridgeName: "clibr-" + name,
			IPv4Subnet: fmt.Sprintf("198.18.%d.0/24", 210+i), IPAMDataDir: ipam})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cninet.WriteConfList(dir, conf); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// versionOnlyPlugins writes plugins that answer only VERSION.
func versionOnlyPlugins(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\necho '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\"]}'\n"
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestNetworkFlags(t *testing.T) {
	dir := confDirOf(t, "clia", "clib")
	all := versionOnlyPlugins(t, "loopback", "bridge", "firewall", "portmap")
	cases := []struct {
		name   string
		args   []string
		code   int
		output string // in stdout (exit 0) or stderr
	}{
		{"several --network without --conf-dir is a usage error",
			[]string{"setup", "--id", "a", "--netns", "/x", "--network", "clia", "--network", "clib"}, 2, "need --conf-dir"},
		{"status covers every network in --conf-dir",
			[]string{"status", "--conf-dir", dir, "--cni-path", all}, 0, `ready: networks "clia", "clib"`},
		{"status names the network that is not ready",
			[]string{"status", "--conf-dir", dir, "--cni-path", versionOnlyPlugins(t, "loopback", "bridge", "firewall")}, 1, `network "clib"`},
		{"an unknown --network is a failure naming the known ones",
			[]string{"check", "--conf-dir", dir, "--cni-path", all, "--id", "a", "--netns", "/proc/self/ns/net", "--network", "clia", "--network", "nope"}, 1, "known: clia, clib"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			out := stderr
			if tc.code == 0 {
				out = stdout
			}
			if code != tc.code || !strings.Contains(out, tc.output) {
				t.Fatalf("exit %d, want %d with %q in:\n%s%s", code, tc.code, tc.output, stdout, stderr)
			}
		})
	}
}

func TestTwoNetworksThroughTheCLI(t *testing.T) {
	netsandbox.Require(t)
	w := netsandbox.NewWorkload(t)
	dir := confDirOf(t, "clim1", "clim2")
	common := []string{"--cni-path", "/usr/lib/cni", "--conf-dir", dir, "--id", "cli-m"}
	joined := append([]string{"--network", "clim1", "--network", "clim2"}, common...)
	code, out, stderr := runCLI(append([]string{"setup", "--netns", w.Path}, joined...)...)
	if code != 0 {
		t.Fatalf("setup exit %d: %s", code, stderr)
	}
	var status struct {
		Interface string `json:"interface"`
		Networks  []struct{ Network, Interface, Address string }
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil || status.Interface != "eth0" || len(status.Networks) != 2 ||
		status.Networks[1].Network != "clim2" || status.Networks[1].Interface != "eth1" || !strings.HasPrefix(status.Networks[1].Address, "198.18.211.") {
		t.Fatalf("setup printed %s (%v)", out, err)
	}
	code, out, stderr = runCLI(append([]string{"check", "--netns", w.Path}, joined...)...)
	if code != 0 {
		t.Fatalf("check exit %d: %s%s", code, out, stderr)
	}
	w.Delete()
	code, out, stderr = runCLI("gc", "--cni-path", "/usr/lib/cni", "--conf-dir", dir, "--none-live")
	if code != 0 || !strings.Contains(out, "cli-m") {
		t.Fatalf("gc exit %d, printed %s: %s", code, out, stderr)
	}
	if code, _, stderr := runCLI(append([]string{"teardown"}, joined...)...); code != 0 {
		t.Fatalf("teardown after gc exit %d: %s", code, stderr)
	}
}

func TestConnectAndDisconnectThroughTheCLI(t *testing.T) {
	netsandbox.Require(t)
	w := netsandbox.NewWorkload(t)
	dir := confDirOf(t, "clic1", "clic2")
	common := []string{"--cni-path", "/usr/lib/cni", "--conf-dir", dir, "--id", "cli-c", "-p", "28095:80/tcp"}
	if code, _, stderr := runCLI(append([]string{"setup", "--netns", w.Path, "--network", "clic1"}, common...)...); code != 0 {
		t.Fatalf("setup exit %d: %s", code, stderr)
	}
	code, out, stderr := runCLI(append([]string{"connect", "--netns", w.Path, "--network", "clic2"}, common...)...)
	var status map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &status) != nil || status["interface"] != "eth1" || status["network"] != "clic2" ||
		!strings.HasPrefix(fmt.Sprint(status["address"]), "198.18.211.") {
		t.Fatalf("connect exit %d, printed %s: %s", code, out, stderr)
	}
	if code, _, stderr := runCLI(append([]string{"connect", "--netns", w.Path, "--network", "clic2"}, common...)...); code != 1 ||
		!strings.Contains(stderr, "already attached") {
		t.Fatalf("connecting twice: exit %d, %s; want 1 saying it is already attached", code, stderr)
	}
	for i := range 2 { // the second time there is nothing left to detach
		if code, _, stderr := runCLI(append([]string{"disconnect", "--netns", w.Path, "--network", "clic2"}, common...)...); code != 0 {
			t.Fatalf("disconnect %d: exit %d: %s", i+1, code, stderr)
		}
	}
	if code, _, stderr := runCLI(append([]string{"check", "--netns", w.Path, "--network", "clic1"}, common...)...); code != 0 {
		t.Fatalf("check of the network left: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(append([]string{"connect", "--netns", w.Path, "--network", "clic2"}, common...)...); code != 0 {
		t.Fatalf("connecting again after the disconnect: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runCLI(append([]string{"teardown", "--network", "clic1"}, common...)...); code != 0 {
		t.Fatalf("teardown exit %d: %s", code, stderr)
	}
	if left, _ := filepath.Glob("/var/lib/cni/results/*cli-c*"); len(left) > 0 {
		t.Fatalf("teardown left cached attachments %v: the connected network was not detached", left)
	}
}

func TestConnectFlags(t *testing.T) {
	dir := confDirOf(t, "clia", "clib")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"connect needs --conf-dir", []string{"connect", "--id", "a", "--netns", "/x", "--network", "clib"}, "--conf-dir is required"},
		{"connect needs exactly one --network", []string{"connect", "--conf-dir", dir, "--id", "a", "--netns", "/x"}, "exactly one --network"},
		{"connect needs --netns", []string{"connect", "--conf-dir", dir, "--id", "a", "--network", "clib"}, "--netns is required"},
		{"disconnect needs --id", []string{"disconnect", "--conf-dir", dir, "--network", "clib"}, "--id is required"},
		{"disconnect takes one --network", []string{"disconnect", "--conf-dir", dir, "--id", "a", "--network", "clia", "--network", "clib"}, "exactly one --network"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want a usage error saying %q", code, stderr, tc.want)
			}
		})
	}
}
