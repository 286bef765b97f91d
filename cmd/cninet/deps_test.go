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
