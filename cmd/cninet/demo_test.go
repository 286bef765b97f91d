package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestDemoRunsTheWholeStoryWithoutLeaks(t *testing.T) {
	netsandbox.Require(t)
	var out, errOut bytes.Buffer
	if _, err := runDemo([]string{"/usr/lib/cni"}, cninet.BackendIPTables, false, false, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{`said "hello from web-1"`, "leaks: 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}
