package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestManWritesAPagePerCommandWithItsFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	if code, _, stderr := runCLI("man", "--dir", dir); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for page, wants := range map[string][]string{
		"cninet.1":        {".TH CNINET 1", ".SH COMMANDS", "cninet\\-gc(1)"},
		"cninet-gc.1":     {".TH CNINET-GC 1", `\-\-dry\-run`, `\-\-live ids`, ".SH EXIT STATUS", "cninet(1)"},
		"cninet-daemon.1": {`\-\-drain\-timeout`, `\-\-metrics\-listen`},
	} {
		raw, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range wants {
			if !strings.Contains(string(raw), want) {
				t.Errorf("%s lacks %q:\n%s", page, want, raw)
			}
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "'") {
				t.Errorf("%s:%d starts with a roff control character: %q", page, i+1, line)
			}
		}
	}
}

func TestManNeedsADirectory(t *testing.T) {
	if code, _, _ := runCLI("man"); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}
