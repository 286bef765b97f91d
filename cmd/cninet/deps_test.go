package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// importersOfTesting are the packages of a production binary's build that
// may import package testing: go-cni's testutils.go, a non-test file of
// its package (v1.1.14), does. Nothing of this module may.
var importersOfTesting = []string{"github.com/containerd/go-cni"}

func TestNoProductionBinaryLinksTestHelpers(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		netsandbox.Unavailable(t, "no go tool to list the dependencies with")
	}
	for _, pkg := range []string{".", "../cninet-shim"} {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.Command(goTool, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", pkg, err)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				f := strings.Fields(line)
				if strings.Contains(f[0], "netsandbox") || strings.Contains(f[0], "/internal/fake") || strings.Contains(f[0], "/cninettest") {
					t.Errorf("%s links the test helper %s", pkg, f[0])
				}
				if slices.Contains(f[1:], "testing") && !slices.Contains(importersOfTesting, f[0]) {
					t.Errorf("%s links package testing through %s", pkg, f[0])
				}
			}
		})
	}
}

// shimImports is all the cninet-shim links besides the Go runtime (the
// standard library's internal/ and runtime packages): what it needs to
// speak CNI and HTTP over a unix socket. Each package more is paid for at
// every start of the shim, which runtimes exec for every CNI command;
// its own DEL runs in cninet. Not here, on purpose: os, fmt, reflect,
// net, net/http, encoding/json, regexp, runtime/debug, the CNI
// libraries, and every package of cninet but thickwire.
var shimImports = []string{
	"cmp", "errors", "io", "iter", "math/bits", "slices", "strconv", "strings", "sync", "sync/atomic",
	"syscall", "time", "unicode", "unicode/utf16", "unicode/utf8", "unsafe",
	"github.com/seed1280861d/cninet/internal/thickwire",
	"github.com/seed1280861d/cninet/cmd/cninet-shim",
}

func TestTheShimLinksOnlyWhatItNeeds(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		netsandbox.Unavailable(t, "no go tool to list the dependencies with")
	}
	out, err := exec.Command(goTool, "list", "-deps", "../cninet-shim").Output()
	if err != nil {
		t.Fatalf("go list -deps ../cninet-shim: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "runtime" || strings.HasPrefix(pkg, "internal/") || strings.HasPrefix(pkg, "runtime/internal/") || slices.Contains(shimImports, pkg) {
			continue
		}
		t.Errorf("cninet-shim links %s, which is not in shimImports: each package is paid for at every start of the shim", pkg)
	}
}
