package main

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

// envelopeOf decodes what a command printed with --output json: exactly
// one JSON object, its keys as printed.
func envelopeOf(t *testing.T, out string) map[string]json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var env map[string]json.RawMessage
	if err := dec.Decode(&env); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("more than one JSON value:\n%s", out)
	}
	return env
}

func TestEveryCommandPrintsOneEnvelopeWithOutputJSON(t *testing.T) {
	dir := confDirOf(t, "clia")
	cases := []struct {
		name    string
		args    []string
		command string
		code    int
		keys    []string // of the envelope, besides command, ok and exit_code
		result  string   // in the result
	}{
		{"conflist's result is the conflist", []string{"conflist", "--network", "edge"}, "conflist", 0, []string{"result"}, `"conflist":{"cniVersion"`},
		{"version's result is the version", []string{"version"}, "version", 0, []string{"result"}, `"version":"`},
		{"gc --dry-run's result lists what it would remove", []string{"gc", "--conf-dir", dir, "--none-live", "--dry-run", "--state-dir", t.TempDir()},
			"gc", 0, []string{"result"}, `"would_remove":[]`},
		{"a usage error has an error and no result", []string{"gc", "--none-live"}, "gc", 2, []string{"error"}, ""},
		{"an unknown flag is reported in the envelope too", []string{"status", "--bridge", "br9"}, "status", 2, []string{"error"}, ""},
		{"a failure has an error", []string{"status", "--conf-dir", dir, "--cni-path", t.TempDir()}, "status", 1, []string{"error"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI(append(tc.args, "--output", "json")...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, stderr)
			}
			env := envelopeOf(t, out)
			want := append([]string{"command", "ok", "exit_code"}, tc.keys...)
			if got := slices.Sorted(maps.Keys(env)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Fatalf("keys %q, want %q:\n%s", got, want, out)
			}
			var command string
			var ok bool
			var exit int
			json.Unmarshal(env["command"], &command)
			json.Unmarshal(env["ok"], &ok)
			json.Unmarshal(env["exit_code"], &exit)
			if command != tc.command || ok != (tc.code == 0) || exit != tc.code {
				t.Fatalf("command %q ok %v exit_code %d, want %q %v %d", command, ok, exit, tc.command, tc.code == 0, tc.code)
			}
			if compact := compactJSON(t, env["result"]); !strings.Contains(compact, tc.result) {
				t.Fatalf("result %s lacks %s", compact, tc.result)
			}
		})
	}
}

func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	if raw == nil {
		return ""
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestTextIsTheDefaultOutput(t *testing.T) {
	code, out, _ := runCLI("version")
	if code != 0 || strings.HasPrefix(out, "{") {
		t.Fatalf("exit %d, printed %q: want text", code, out)
	}
}

func TestTheEnvelopeKeepsArrowsAsTheyAre(t *testing.T) {
	var out strings.Builder
	printJSON(&out, map[string]string{"detail": "web-1 -> 198.18.0.2"})
	if !strings.Contains(out.String(), `"web-1 -> 198.18.0.2"`) {
		t.Fatalf("printed %s", out.String())
	}
}
