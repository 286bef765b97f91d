package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/buildinfo"
)

// runMainEnv makes the test binary run the shim's main instead of the
// tests, so that a test drives the shim as a runtime does.
const runMainEnv = "CNINET_SHIM_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A runtime's VERSION command gets the standard answer, which libcni
// decodes, with cninet's version beside it.
func TestVersionAnswerNamesCninetsVersion(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runMainEnv+"=1", "CNI_COMMAND=VERSION")
	cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("VERSION: %v (stdout %q)", err, out)
	}
	info, err := (&version.PluginDecoder{}).Decode(out)
	if err != nil {
		t.Fatalf("libcni cannot decode the answer %s: %v", out, err)
	}
	if want := supported.SupportedVersions(); !slices.Equal(info.SupportedVersions(), want) {
		t.Errorf("supportedVersions = %v, want %v", info.SupportedVersions(), want)
	}
	var fields struct {
		CninetVersion string `json:"cninetVersion"`
	}
	if err := json.Unmarshal(out, &fields); err != nil {
		t.Fatal(err)
	}
	if fields.CninetVersion == "" || fields.CninetVersion != buildinfo.Version() {
		t.Errorf("cninetVersion = %q, want %q (answer %s)", fields.CninetVersion, buildinfo.Version(), out)
	}
}
