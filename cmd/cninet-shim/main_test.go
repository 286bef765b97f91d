package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/buildinfo"
	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The test binary stands in for the shim when these are set: runMainEnv
// runs main; frontEnv runs a CNI front ("skel" or "shim") whose commands
// print what they were called with.
const (
	runMainEnv = "CNINET_SHIM_TEST_RUN_MAIN"
	frontEnv   = "CNINET_SHIM_TEST_FRONT"
)

func TestMain(m *testing.M) {
	switch os.Getenv(frontEnv) {
	case "skel":
		runSkelFront()
	case "shim":
		runShimFront()
	}
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
	if filepath.Base(os.Args[0]) == fakeCninetName {
		runFakeCninet()
	}
	code := m.Run()
	for _, dir := range copyDirs {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// called is what a front's command was called with.
type called struct {
	Command                                string
	ContainerID, Netns, IfName, Args, Path string
	Stdin                                  string
}

func printCalled(command, id, netns, ifName, args, path string, stdin []byte) error {
	b, _ := json.Marshal(called{command, id, netns, ifName, args, path, string(stdin)})
	fmt.Println(string(b))
	return nil
}

func runSkelFront() {
	rec := func(command string) func(*skel.CmdArgs) error {
		return func(a *skel.CmdArgs) error {
			return printCalled(command, a.ContainerID, a.Netns, a.IfName, a.Args, a.Path, a.StdinData)
		}
	}
	err := skel.PluginMainFuncsWithError(skel.CNIFuncs{Add: rec("ADD"), Del: rec("DEL"), Check: rec("CHECK"), Status: rec("STATUS"), GC: rec("GC")},
		version.PluginSupports(thickwire.CNIVersions...), "about")
	if err != nil {
		fmt.Fprintf(os.Stderr, "code=%d\n", err.Code)
		os.Exit(1)
	}
	os.Exit(0)
}

func runShimFront() {
	rec := func(command string) func(*cniArgs) error {
		return func(a *cniArgs) error {
			return printCalled(command, a.ContainerID, a.Netns, a.IfName, a.Args, a.Path, a.StdinData)
		}
	}
	err := pluginMain(os.Getenv, os.Stdin, os.Stdout, os.Stderr,
		cniCommands{Add: rec("ADD"), Del: rec("DEL"), Check: rec("CHECK"), Status: rec("STATUS"), GC: rec("GC")}, "(test)")
	if err != nil {
		fmt.Fprintf(os.Stderr, "code=%d\n", err.Code)
		os.Exit(1)
	}
	os.Exit(0)
}

// front runs the test binary as front with env and stdin: what its
// command was called with (stdout) and the CNI code it refused with
// ("" when none).
func front(t *testing.T, which string, env []string, stdin string) (calledWith, code string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append([]string{frontEnv + "=" + which}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Run()
	for _, line := range strings.Split(errOut.String(), "\n") {
		if c, ok := strings.CutPrefix(line, "code="); ok {
			code = c
		}
	}
	return out.String(), code
}

// The shim's CNI front (without skel) reads the environment and stdin
// as skel does: the same command runs with the same arguments, or the
// same CNI code refuses it, case by case.
func TestTheCNIFrontReadsAsSkel(t *testing.T) {
	all := []string{"CNI_CONTAINERID=c1", "CNI_NETNS=/run/netns/w", "CNI_IFNAME=eth0", "CNI_PATH=/opt/cni/bin", "CNI_ARGS=K=V"}
	without := func(env []string, name string) []string {
		return slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, name+"=") })
	}
	with := func(env []string, kv ...string) []string {
		for _, e := range kv {
			name, _, _ := strings.Cut(e, "=")
			env = append(without(env, name), e)
		}
		return env
	}
	conf := func(version string) string {
		return `{"cniVersion":"` + version + `","name":"web","type":"cninet-shim"}`
	}
	cases := []struct {
		name  string
		env   []string
		stdin string
	}{
		{"ADD with everything runs", with(all, "CNI_COMMAND=ADD"), conf("1.0.0")},
		{"no CNI_COMMAND runs nothing and succeeds", all, conf("1.0.0")},
		{"an unknown command is code 4", with(all, "CNI_COMMAND=FOO"), conf("1.0.0")},
		{"an unknown command with stdin no JSON is code 6", with(all, "CNI_COMMAND=FOO"), "{"},
		{"ADD without CNI_NETNS and CNI_PATH is code 4", without(without(with(all, "CNI_COMMAND=ADD"), "CNI_NETNS"), "CNI_PATH"), conf("1.0.0")},
		{"a bad container id is code 4 before a missing variable", without(with(all, "CNI_COMMAND=ADD", "CNI_CONTAINERID=a/b"), "CNI_PATH"), conf("1.0.0")},
		{"DEL without CNI_NETNS runs", without(with(all, "CNI_COMMAND=DEL"), "CNI_NETNS"), conf("1.0.0")},
		{"DEL without CNI_IFNAME is code 4", without(with(all, "CNI_COMMAND=DEL"), "CNI_IFNAME"), conf("1.0.0")},
		{"an interface name of 16 bytes is code 4", with(all, "CNI_COMMAND=ADD", "CNI_IFNAME=abcdefghijklmnop"), conf("1.0.0")},
		{"an interface name .. is code 4", with(all, "CNI_COMMAND=CHECK", "CNI_IFNAME=.."), conf("1.0.0")},
		{"an interface name with ':' is code 4", with(all, "CNI_COMMAND=ADD", "CNI_IFNAME=eth0:1"), conf("1.0.0")},
		{"an interface name with a no-break space is code 4", with(all, "CNI_COMMAND=ADD", "CNI_IFNAME=eth\u00a00"), conf("1.0.0")},
		{"STATUS needs CNI_PATH only", []string{"CNI_COMMAND=STATUS", "CNI_PATH=/opt/cni/bin"}, conf("1.1.0")},
		{"GC runs", with(all, "CNI_COMMAND=GC"), conf("1.1.0")},
		{"stdin that is no JSON is code 6", with(all, "CNI_COMMAND=ADD"), `{"name":`},
		{"JSON with something after it is code 6", with(all, "CNI_COMMAND=ADD"), conf("1.0.0") + " x"},
		{"a JSON array is code 6", with(all, "CNI_COMMAND=ADD"), `[]`},
		{"null names no network: code 7", with(all, "CNI_COMMAND=ADD"), `null`},
		{"no name is code 7", with(all, "CNI_COMMAND=ADD"), `{"cniVersion":"1.0.0"}`},
		{"a name that is a number is code 6", with(all, "CNI_COMMAND=ADD"), `{"cniVersion":"1.0.0","name":5}`},
		{"a name with a slash is code 7", with(all, "CNI_COMMAND=ADD"), `{"cniVersion":"1.0.0","name":"a/b"}`},
		{"the last of two names counts", with(all, "CNI_COMMAND=ADD"), `{"cniVersion":"1.0.0","name":"a/b","name":"web"}`},
		{"a name in capitals counts", with(all, "CNI_COMMAND=ADD"), `{"cniVersion":"1.0.0","NAME":"web"}`},
		{"an exact name wins over one in capitals", with(all, "CNI_COMMAND=ADD"), `{"cniVersion":"1.0.0","name":"web","Name":"a/b"}`},
		{"no cniVersion is 0.1.0: code 1", with(all, "CNI_COMMAND=ADD"), `{"name":"web"}`},
		{"a cniVersion that is a number is code 6", with(all, "CNI_COMMAND=ADD"), `{"cniVersion":1,"name":"web"}`},
		{"a cniVersion the shim does not speak is code 1", with(all, "CNI_COMMAND=DEL"), conf("0.2.0")},
		{"CHECK of 0.3.1 is code 1", with(all, "CNI_COMMAND=CHECK"), conf("0.3.1")},
		{"CHECK of 0.4.0 runs", with(all, "CNI_COMMAND=CHECK"), conf("0.4.0")},
		{"CHECK of no version at all is code 6", with(all, "CNI_COMMAND=CHECK"), conf("abc")},
		{"CHECK of 0.4.1 is code 1", with(all, "CNI_COMMAND=CHECK"), conf("0.4.1")},
		{"CHECK of 2.0.0 is code 1", with(all, "CNI_COMMAND=CHECK"), conf("2.0.0")},
		{"CHECK of 1.0.0.0 is code 6", with(all, "CNI_COMMAND=CHECK"), conf("1.0.0.0")},
		{"STATUS of 1.0.0 is code 1", with(all, "CNI_COMMAND=STATUS"), conf("1.0.0")},
		{"GC of 1.1 is code 1", with(all, "CNI_COMMAND=GC"), conf("1.1")},
		{"strings are read with their escapes", with(all, "CNI_COMMAND=ADD"), `{"cniVersion":"1.0\u002e0","name":"w\u0065b"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantCalled, wantCode := front(t, "skel", tc.env, tc.stdin)
			gotCalled, gotCode := front(t, "shim", tc.env, tc.stdin)
			if gotCalled != wantCalled || gotCode != wantCode {
				t.Fatalf("the shim's front: called %q, code %q; skel: called %q, code %q", gotCalled, gotCode, wantCalled, wantCode)
			}
		})
	}
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
	if !slices.Equal(info.SupportedVersions(), thickwire.CNIVersions) {
		t.Errorf("supportedVersions = %v, want %v", info.SupportedVersions(), thickwire.CNIVersions)
	}
	var fields map[string]any
	if err := json.Unmarshal(out, &fields); err != nil {
		t.Fatal(err)
	}
	if fields["cniVersion"] != version.Current() || len(fields) != 3 {
		t.Errorf("answer %s, want cniVersion %s, supportedVersions and cninetVersion", out, version.Current())
	}
	if got := fields["cninetVersion"]; got == "" || got != buildinfo.Version() {
		t.Errorf("cninetVersion = %q, want %q (answer %s)", got, buildinfo.Version(), out)
	}
}

// cninet's version is found in the module info as buildinfo finds it.
func TestVersionIn(t *testing.T) {
	cases := []struct{ name, modinfo, want string }{
		{"cninet's own binary says its main module's version",
			"path\tgithub.com/seed1280861d/cninet/cmd/cninet-shim\nmod\tgithub.com/seed1280861d/cninet\tv0.1.0\th1:x=\ndep\tgolang.org/x/sys\tv0.1.0\th1:y=\n", "v0.1.0"},
		{"a build that recorded no version says (devel)",
			"path\tgithub.com/seed1280861d/cninet/cmd/cninet-shim\nmod\tgithub.com/seed1280861d/cninet\t(devel)\t\n", devel},
		{"an empty version says (devel)", "mod\tgithub.com/seed1280861d/cninet\t\t\n", devel},
		{"an importer's binary says the dependency's version",
			"mod\texample.com/orch\tv9.9.9\t\ndep\tgithub.com/seed1280861d/cninet\tv0.2.0\th1:z=\ndep\tother\tv1.0.0\t\n", "v0.2.0"},
		{"a replaced dependency says the replacement's version",
			"mod\texample.com/orch\t\t\ndep\tgithub.com/seed1280861d/cninet\tv0.2.0\t\n=>\t../cninet\t(devel)\t\n", devel},
		{"a binary without cninet says (devel)", "mod\texample.com/orch\tv1.0.0\t\n", devel},
		{"no module info says (devel)", "", devel},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionIn(tc.modinfo); got != tc.want {
				t.Errorf("versionIn = %q, want %q", got, tc.want)
			}
		})
	}
	if cninetModule != buildinfo.Module {
		t.Errorf("cninetModule %q, buildinfo.Module %q", cninetModule, buildinfo.Module)
	}
}

// The build info is read from an executable as Go's own reader reads
// it; a file that is none has none.
func TestReadBuildInfoOfAnExecutable(t *testing.T) {
	got, err := readBuildInfo("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "mod\t"+buildinfo.Module+"\t") {
		t.Errorf("module info %q names no main module %s", got, buildinfo.Module)
	}
	notExe := t.TempDir() + "/x"
	if err := os.WriteFile(notExe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := readBuildInfo(notExe); err == nil {
		t.Error("a shell script has build info, want none")
	}
}

// The build info blob is found at a 16-byte boundary; one that goes on
// past what was read says so, for a longer read.
func TestBuildInfoIn(t *testing.T) {
	frame := strings.Repeat("F", 16)
	blob := func(modinfo string) []byte {
		b := append([]byte(buildInfoMagic), 8, 0x2)
		b = append(b, make([]byte, 16)...)
		b = append(b, 6)
		b = append(b, "go1.26"...)
		framed := frame + modinfo + frame
		for n := len(framed); ; n >>= 7 {
			if n < 0x80 {
				b = append(b, byte(n))
				break
			}
			b = append(b, byte(n&0x7f|0x80))
		}
		return append(b, framed...)
	}
	long := strings.Repeat("dep\texample.com/x\tv1.0.0\t\n", 20)
	data := append(make([]byte, 32), blob(long)...)
	if got, cut, err := buildInfoIn(data); err != nil || cut || got != long {
		t.Fatalf("whole blob at offset 32: %q, cut %v, %v", got, cut, err)
	}
	if _, cut, err := buildInfoIn(data[:200]); !cut || err == nil {
		t.Fatalf("a blob cut short: cut %v, %v; want cut", cut, err)
	}
	if _, _, err := buildInfoIn(make([]byte, 512)); err == nil {
		t.Fatal("no blob found, yet no error")
	}
}
