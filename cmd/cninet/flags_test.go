package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
		{"status --network narrows it to the networks named",
			[]string{"status", "--conf-dir", dir, "--cni-path", all, "--network", "clib"}, 0, "ready: network \"clib\"\n"},
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

func TestPortFlagProtocols(t *testing.T) {
	cases := []struct {
		name, value, wantProto string
		wantErr                bool
	}{
		{"no protocol maps tcp and udp", "8080:80", "", false},
		{"tcp is taken", "8080:80/tcp", "tcp", false},
		{"udp is taken", "8080:80/udp", "udp", false},
		{"sctp is taken, as portmap maps it", "8080:80/sctp", "sctp", false},
		{"another protocol is refused", "8080:80/icmp", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p portFlags
			err := p.Set(c.value)
			if (err != nil) != c.wantErr {
				t.Fatalf("Set(%q) = %v, want error %v", c.value, err, c.wantErr)
			}
			if err == nil && p[0].Protocol != c.wantProto {
				t.Errorf("Set(%q): protocol %q, want %q", c.value, p[0].Protocol, c.wantProto)
			}
		})
	}
}
