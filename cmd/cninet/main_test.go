package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sasha-s/go-deadlock"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/buildinfo"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" { // a test runs this binary as the cninet command
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	// Under -race go-cni guards itself with go-deadlock, whose goroutine ids
	// read 0 on this Go release: every pair of concurrent Setups then looks
	// like one goroutine locking twice, and the detector exits the process.
	deadlock.Opts.Disable = true
	netsandbox.Main(m)
}

// runMainEnv makes the test binary run as the cninet command: a test
// that needs a cninet process of its own (signals, inherited sockets)
// runs os.Args[0] with it set.
const runMainEnv = "CNINET_TEST_RUN_MAIN"

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The exit code says how a command ended, the same for every command: 0
// success, 1 the operation failed, 2 the command line is wrong (and
// nothing was done).
func TestExitCodes(t *testing.T) {
	dir := confDirOf(t, "clia", "clib")
	empty := t.TempDir()
	noIDs := filepath.Join(t.TempDir(), "live")
	if err := os.WriteFile(noIDs, []byte("# nothing runs\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gc := func(args ...string) []string { return append([]string{"gc", "--conf-dir", dir}, args...) }
	// dry is a gc that, were its usage checks broken, reads an empty cache
	// and changes nothing.
	dry := func(args ...string) []string { return gc(append(args, "--dry-run", "--state-dir", empty)...) }
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"no command is a usage error", nil, 2},
		{"an unknown command is a usage error", []string{"frobnicate"}, 2},
		{"--help succeeds", []string{"--help"}, 0},
		{"help succeeds", []string{"help"}, 0},
		{"a command's --help succeeds", []string{"setup", "--help"}, 0},
		{"--version succeeds", []string{"--version"}, 0},
		{"version succeeds", []string{"version"}, 0},
		{"bash completion succeeds", []string{"completion", "bash"}, 0},
		{"conflist succeeds", []string{"conflist"}, 0},
		{"an unknown flag is a usage error", []string{"conflist", "--nope"}, 2},
		{"a flag without its value is a usage error", []string{"conflist", "--network"}, 2},
		{"an unknown --output is a usage error", []string{"version", "--output", "yaml"}, 2},
		{"an unknown --log-level is a usage error", []string{"status", "--log-level", "loud"}, 2},
		{"a stray argument is a usage error", []string{"status", "extra"}, 2},
		{"an invalid subnet is a usage error", []string{"conflist", "--subnet", "198.18.0.1/24"}, 2},
		{"a bridge flag on setup is a usage error", []string{"setup", "--id", "a", "--netns", "/x", "--subnet", "198.18.0.0/24"}, 2},
		{"a bridge flag on gc is a usage error", dry("--none-live", "--bridge", "br9"), 2},
		{"--conf-dir and --conflist together are a usage error", []string{"status", "--conf-dir", dir, "--conflist", filepath.Join(dir, "clia.conflist")}, 2},
		{"setup without --id is a usage error", []string{"setup", "--netns", "/var/run/netns/x"}, 2},
		{"setup without --netns is a usage error", []string{"setup", "--id", "a"}, 2},
		{"an --id CNI would reject is a usage error", []string{"setup", "--id", "a/b", "--netns", "/x"}, 2},
		{"a malformed port mapping is a usage error", []string{"setup", "--id", "a", "--netns", "/x", "-p", "80:http"}, 2},
		{"gc without networks is a usage error, even with --none-live", []string{"gc", "--none-live", "--dry-run", "--state-dir", empty}, 2},
		{"gc without a live set is a usage error", dry(), 2},
		{"gc with --none-live and --live is a usage error", dry("--none-live", "--live", "a"), 2},
		{"gc with an empty --live entry is a usage error", dry("--live", "a,,b"), 2},
		{"gc with a --live id CNI would reject is a usage error", dry("--live", "a b"), 2},
		{"gc with a missing --live-file is a usage error", dry("--live-file", filepath.Join(empty, "absent")), 2},
		{"gc with a --live-file listing no id is a usage error", dry("--live-file", noIDs), 2},
		{"gc --dry-run succeeds", dry("--live", "a"), 0},
		{"gc naming the embedded network with --network succeeds", []string{"gc", "--network", "nomad", "--none-live", "--dry-run", "--state-dir", empty}, 0},
		{"gc of one --conflist succeeds", []string{"gc", "--conflist", filepath.Join(dir, "clia.conflist"), "--none-live", "--dry-run", "--state-dir", empty}, 0},
		{"gc --dry-run of a network missing from --conf-dir is a failure", dry("--none-live", "--network", "absent-net"), 1},
		{"a network missing from --conf-dir is a failure", []string{"status", "--conf-dir", empty, "--network", "absent-net"}, 1},
		{"a missing --conflist is a usage error", []string{"status", "--conflist", filepath.Join(empty, "absent.conflist")}, 2},
		{"a missing plugin is a failure", []string{"status", "--conf-dir", dir, "--cni-path", empty}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			if tc.code == 2 && len(tc.args) > 0 && !strings.Contains(stderr, "--help' for usage") {
				t.Errorf("a usage error says where the usage is; stderr:\n%s", stderr)
			}
		})
	}
}

func TestVersionPrintsCninetAndItsVersion(t *testing.T) {
	want := "cninet " + buildinfo.Version() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if code, out, stderr := runCLI(args...); code != 0 || out != want {
			t.Errorf("%v: exit %d, printed %q (%s); want %q", args, code, out, stderr, want)
		}
	}
}

func TestCompletionScriptsAreGenerated(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, stderr := runCLI("completion", shell)
		if code != 0 || !strings.Contains(out, "cninet") {
			t.Errorf("%s: exit %d, %d bytes (%s)", shell, code, len(out), stderr)
		}
	}
}

func TestTheDaemonsHelpListsEveryFlag(t *testing.T) {
	_, out, _ := runCLI("daemon", "--help")
	for _, flag := range []string{"--socket", "--conf-dir", "--cni-path", "--cache-dir", "--state-dir", "--metrics-listen", "--log-level",
		"--max-concurrent", "--timeout", "--drain-timeout"} {
		if !strings.Contains(out, flag+" ") {
			t.Errorf("daemon --help lacks %s:\n%s", flag, out)
		}
	}
}

// confDirOf writes a bridge network per name, each with its own bridge
// and subnet (198.18.210+i.0/24), into a new directory.
func confDirOf(t *testing.T, names ...string) string {
	t.Helper()
	dir, _ := confDirWithIPAM(t, names...)
	return dir
}

// confDirWithIPAM is confDirOf, also returning the networks' host-local
// data directory (a reservation is ipam/<network>/<address>).
func confDirWithIPAM(t *testing.T, names ...string) (dir, ipam string) {
	t.Helper()
	dir, ipam = t.TempDir(), t.TempDir()
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
	return dir, ipam
}
