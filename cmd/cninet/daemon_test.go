package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

func TestDaemonFlags(t *testing.T) {
	empty := t.TempDir()
	cases := []struct {
		name   string
		args   []string
		code   int
		output string
	}{
		{"a relative --socket is a usage error", []string{"daemon", "--socket", "run/cninet.sock"}, 2, `--socket "run/cninet.sock", want a clean absolute path`},
		{"a --socket with .. in it is a usage error naming the clean path", []string{"daemon", "--socket", "/run/cninet/../cninet.sock"}, 2, `want a clean absolute path ("/run/cninet.sock")`},
		{"a --state-dir with // in it is a usage error", []string{"daemon", "--state-dir", "/var/lib//cninet"}, 2, `--state-dir "/var/lib//cninet"`},
		{"a relative --conf-dir is a usage error", []string{"daemon", "--conf-dir", "net.d"}, 2, "--conf-dir"},
		{"a relative --cache-dir is a usage error", []string{"daemon", "--cache-dir", "cache"}, 2, "--cache-dir"},
		{"--max-concurrent 0 is a usage error", []string{"daemon", "--max-concurrent", "0"}, 2, "must be positive"},
		{"an unknown --log-level is a usage error", []string{"daemon", "--log-level", "loud"}, 2, "--log-level"},
		{"an argument is a usage error", []string{"daemon", "extra"}, 2, "unexpected argument"},
		{"an unknown --log-format is a usage error", []string{"daemon", "--log-format", "xml"}, 2, `--log-format "xml", want text or json`},
		{"a negative --ready-cache is a usage error", []string{"daemon", "--ready-cache", "-1s"}, 2, "--ready-cache -1s, want 0 (no cache) or more"},
		{"a negative --memory-limit is a usage error", []string{"daemon", "--memory-limit", "-1"}, 2, "--memory-limit -1, want 0 (none) or a size in MiB"},
		{"--max-concurrent-probes 0 is a usage error", []string{"daemon", "--max-concurrent-probes", "0"}, 2, "must be positive"},
		{"a socket in a directory others may write fails to start, naming it", []string{"daemon", "--conf-dir", empty, "--socket", "/tmp/cninet-test.sock",
			"--cache-dir", filepath.Join(empty, "cache"), "--state-dir", filepath.Join(empty, "state")}, 1, "/tmp"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.output) {
				t.Fatalf("exit %d, want %d with %q in:\n%s%s", code, tc.code, tc.output, stdout, stderr)
			}
		})
	}
}

func TestTheDaemonsMemoryLimitIsTheFlagGivenElseGOMEMLIMITElseTheDefault(t *testing.T) {
	cases := []struct {
		name      string
		mib       int
		set       bool
		env       string
		limit     int64
		setsLimit bool
	}{
		{"by default the daemon sets the default limit", defaultMemoryLimit, false, "", defaultMemoryLimit << 20, true},
		{"GOMEMLIMIT in the environment wins over the default (the runtime applied it)", defaultMemoryLimit, false, "100MiB", 0, false},
		{"--memory-limit given wins over GOMEMLIMIT", 64, true, "100MiB", 64 << 20, true},
		{"--memory-limit 0 lifts every limit, GOMEMLIMIT's too", 0, true, "100MiB", math.MaxInt64, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			limit, ok := memoryLimit(tc.mib, tc.set, tc.env)
			if limit != tc.limit || ok != tc.setsLimit {
				t.Fatalf("memoryLimit(%d, %v, %q) = %d, %v; want %d, %v", tc.mib, tc.set, tc.env, limit, ok, tc.limit, tc.setsLimit)
			}
		})
	}
}
