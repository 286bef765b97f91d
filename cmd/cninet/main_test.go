package main

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/sasha-s/go-deadlock"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestMain(m *testing.M) {
	// Under -race go-cni guards itself with go-deadlock, whose goroutine ids
	// read 0 on this Go release: every pair of concurrent Setups then looks
	// like one goroutine locking twice, and the detector exits the process.
	deadlock.Opts.Disable = true
	netsandbox.Main(m)
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestExitCodes(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"no command is a usage error", nil, 2},
		{"an unknown command is a usage error", []string{"frobnicate"}, 2},
		{"--help succeeds", []string{"--help"}, 0},
		{"a command's --help succeeds", []string{"setup", "--help"}, 0},
		{"an unknown flag is a usage error", []string{"conflist", "--nope"}, 2},
		{"setup without --id is a usage error", []string{"setup", "--netns", "/var/run/netns/x"}, 2},
		{"setup without --netns is a usage error", []string{"setup", "--id", "a"}, 2},
		{"a malformed port mapping is a usage error", []string{"setup", "--id", "a", "--netns", "/x", "-p", "80:http"}, 2},
		{"gc without a live set is a usage error", []string{"gc"}, 2},
		{"an invalid subnet is a usage error", []string{"conflist", "--subnet", "198.18.0.1/24"}, 2},
		{"a stray argument is a usage error", []string{"status", "extra"}, 2},
		{"a network missing from --conf-dir is a failure", []string{"status", "--conf-dir", os.TempDir(), "--network", "absent-net"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
		})
	}
}

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
