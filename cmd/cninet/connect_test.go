package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestConnectAndDisconnectThroughTheCLI(t *testing.T) {
	netsandbox.Require(t)
	w := netsandbox.NewWorkload(t)
	dir, ipam := confDirWithIPAM(t, "clic1", "clic2")
	common := []string{"--cni-path", "/usr/lib/cni", "--conf-dir", dir, "--id", "cli-c", "-p", "28095:80/tcp"}
	host := newHostCheck(t, "clibr-clic1", "clibr-clic2")
	// connect attaches clic2 and returns its address, checked on the host.
	connect := func(when string) string {
		t.Helper()
		code, out, stderr := runCLI(append([]string{"connect", "-o", "json", "--netns", w.Path, "--network", "clic2"}, common...)...)
		var env struct{ Result map[string]any }
		err := json.Unmarshal([]byte(out), &env)
		if status := env.Result; code != 0 || err != nil || status["interface"] != "eth1" || status["network"] != "clic2" ||
			!strings.HasPrefix(fmt.Sprint(status["address"]), "198.18.211.") {
			t.Fatalf("%s: connect exit %d, printed %s: %s", when, code, out, stderr)
		}
		addr := fmt.Sprint(env.Result["address"])
		host.assertAttached(t, when, addr, ipam, "clic2", "80")
		return addr
	}
	code, out, stderr := runCLI(append([]string{"setup", "-o", "json", "--netns", w.Path, "--network", "clic1"}, common...)...)
	var setup struct{ Result map[string]any }
	if err := json.Unmarshal([]byte(out), &setup); code != 0 || err != nil {
		t.Fatalf("setup exit %d, printed %s (%v): %s", code, out, err, stderr)
	}
	addr1 := fmt.Sprint(setup.Result["address"])
	host.assertAttached(t, "after setup", addr1, ipam, "clic1", "80")
	addr2 := connect("after connect")
	if code, _, stderr := runCLI(append([]string{"connect", "--netns", w.Path, "--network", "clic2"}, common...)...); code != 1 ||
		!strings.Contains(stderr, "already attached") {
		t.Fatalf("connecting twice: exit %d, %s; want 1 saying it is already attached", code, stderr)
	}
	for i := range 2 { // the second time there is nothing left to detach
		if code, _, stderr := runCLI(append([]string{"disconnect", "--netns", w.Path, "--network", "clic2"}, common...)...); code != 0 {
			t.Fatalf("disconnect %d: exit %d: %s", i+1, code, stderr)
		}
		host.assertDetached(t, fmt.Sprintf("after disconnect %d", i+1), addr2, ipam, "clic2")
		host.assertAttached(t, fmt.Sprintf("after disconnect %d", i+1), addr1, ipam, "clic1", "80")
	}
	if code, _, stderr := runCLI(append([]string{"check", "--netns", w.Path, "--network", "clic1"}, common...)...); code != 0 {
		t.Fatalf("check of the network left: exit %d: %s", code, stderr)
	}
	connect("connecting again after the disconnect")
	if code, _, stderr := runCLI(append([]string{"teardown", "--netns", w.Path, "--network", "clic1"}, common...)...); code != 0 {
		t.Fatalf("teardown exit %d: %s", code, stderr)
	}
	host.assertNothingLeft(t, "after teardown")
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
