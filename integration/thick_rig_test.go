package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// thickRig is a cninet daemon serving one delegate network, the
// cninet-shim plugin, and libcni's cnitool driving the shim as a runtime
// would.
type thickRig struct {
	t                        *testing.T
	set                      netsandbox.PluginSet
	nw                       network
	daemonBin, shimDir, tool string
	socket, confDir, netDir  string
	cacheDir, metrics        string
	daemon                   *exec.Cmd
	exited                   chan error
	// extraPluginDirs and extraArgs go on the daemon's command line
	// (rigOptions set them before it starts).
	extraPluginDirs, extraArgs []string
}

// rigOption changes a thickRig before its daemon starts.
type rigOption func(*thickRig)

// newThickRig starts a daemon for a fresh bridge network of set, with a
// shim conflist of shimVersion naming it; metrics, when true, serves
// --metrics-listen on a free loopback port.
func newThickRig(t *testing.T, set netsandbox.PluginSet, shimVersion string, metrics bool, opts ...rigOption) *thickRig {
	t.Helper()
	tool := cnitoolPath(t)
	r := &thickRig{t: t, set: set, nw: newNetwork(t, set, false), tool: tool,
		daemonBin: netsandbox.BuildCommand(t, "cninet", "./cmd/cninet"),
		shimDir:   filepath.Dir(netsandbox.BuildShim(t))}
	tmp := t.TempDir()
	r.socket = filepath.Join(tmp, "run", "cninet.sock")
	r.confDir, r.netDir = filepath.Join(tmp, "delegates"), filepath.Join(tmp, "net.d")
	r.cacheDir = filepath.Join("/var/lib/cni", "cninet-daemon-"+r.nw.cfg.NetworkName) // audited with the rest
	if _, err := cninet.WriteConfList(r.confDir, r.nw.conf); err != nil {
		t.Fatal(err)
	}
	if metrics {
		r.metrics = freeLoopbackAddr(t)
	}
	for _, opt := range opts {
		opt(r)
	}
	r.writeShimConf(shimVersion) // after the options: one may move the socket
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *thickRig) name() string { return r.nw.cfg.NetworkName }

// writeShimConf writes the runtime's conflist: the shim, named like the
// delegate, passing port mappings on.
func (r *thickRig) writeShimConf(version string) { r.writeShimConfOf(r.name(), version) }

func (r *thickRig) writeShimConfOf(name, version string) {
	conf := fmt.Sprintf(`{"cniVersion": %q, "name": %q, "plugins": [{"type": "cninet-shim", "socket": %q, "capabilities": {"portMappings": true}}]}`,
		version, name, r.socket)
	if err := os.MkdirAll(r.netDir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.netDir, name+".conflist"), []byte(conf), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// addNetwork gives the running daemon one more delegate network, and the
// runtime its shim conflist.
func (r *thickRig) addNetwork(nw network, version string) {
	r.t.Helper()
	if _, err := cninet.WriteConfList(r.confDir, nw.conf); err != nil {
		r.t.Fatal(err)
	}
	r.writeShimConfOf(nw.cfg.NetworkName, version)
}

// start runs the daemon and waits until it answers on its socket.
func (r *thickRig) start() {
	r.t.Helper()
	args := []string{"daemon", "--socket", r.socket, "--conf-dir", r.confDir, "--cni-path", strings.Join(append([]string{r.set.Dir}, r.extraPluginDirs...), ":"),
		"--cache-dir", r.cacheDir, "--log-level", "warn"}
	args = append(args, r.extraArgs...)
	if r.metrics != "" {
		args = append(args, "--metrics-listen", r.metrics)
	}
	r.daemon = exec.Command(r.daemonBin, args...)
	r.daemon.Stderr = testWriter{r.t}
	if err := r.daemon.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan error) { exited <- cmd.Wait() }(r.daemon, r.exited)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-r.exited:
			r.daemon = nil
			r.t.Fatalf("cninet daemon exited at start: %v", err)
		default:
		}
		if conn, err := net.Dial("unix", r.socket); err == nil {
			conn.Close()
			return
		}
	}
	r.t.Fatal("cninet daemon did not listen on its socket within 20s")
}

// stop sends SIGTERM and waits for the daemon to drain and exit.
func (r *thickRig) stop() {
	if r.daemon == nil {
		return
	}
	r.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.exited:
		if err != nil {
			r.t.Errorf("cninet daemon exited on SIGTERM with %v", err)
		}
	case <-time.After(40 * time.Second):
		r.daemon.Process.Kill()
		r.t.Error("cninet daemon did not exit within 40s of SIGTERM")
	}
	r.daemon = nil
}

// kill SIGKILLs the daemon, leaving its socket file behind.
func (r *thickRig) kill() {
	r.t.Helper()
	r.daemon.Process.Kill()
	<-r.exited
	r.daemon = nil
}

// runtimeWait bounds each run of cnitool or of the shim: a runtime that
// waits longer is hung (the shim's own limits are far below it).
const runtimeWait = 3 * time.Minute

// cnitool runs cnitool with the runtime's conf dir and the shim as the
// only plugin; env adds variables (CAP_ARGS, CNI_IFNAME). It is killed
// after runtimeWait.
func (r *thickRig) cnitool(env []string, args ...string) (stdout, stderr string, err error) {
	return r.cnitoolIn(r.netDir, env, args...)
}

// cnitoolIn is cnitool with the conflists of netDir.
func (r *thickRig) cnitoolIn(netDir string, env []string, args ...string) (stdout, stderr string, err error) {
	return runCnitool(r.tool, netDir, r.shimDir, env, args...)
}

// cnitoolPath is libcni's cnitool, which the suite installs.
func cnitoolPath(t *testing.T) string {
	t.Helper()
	tool := filepath.Join(netsandbox.RepoRoot(t), ".cache", "bin", "cnitool")
	if _, err := os.Stat(tool); err != nil {
		netsandbox.Unavailable(t, "libcni's cnitool is not installed (run scripts/install-deps.sh): "+err.Error())
	}
	return tool
}

// runCnitool runs tool with the conflists of netDir and the plugins of
// cniPath; env adds variables. It is killed after runtimeWait.
func runCnitool(tool, netDir, cniPath string, env []string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), runtimeWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(os.Environ(), append([]string{"NETCONFPATH=" + netDir, "CNI_PATH=" + cniPath}, env...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// mustCnitool is cnitool that fails the test on error.
func (r *thickRig) mustCnitool(env []string, args ...string) string {
	r.t.Helper()
	out, errOut, err := r.cnitool(env, args...)
	if err != nil {
		r.t.Fatalf("cnitool %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// shimError runs the shim as a runtime execs it (CNI_* in the environment,
// its conflist's plugin config on stdin) and returns the CNI error it
// printed; it fails the test when the shim succeeded.
func (r *thickRig) shimError(command, id, netns string) types.Error {
	r.t.Helper()
	return r.shimErrorOn(r.name(), command, id, netns)
}

// shimErrorOn is shimError for the shim network named network.
func (r *thickRig) shimErrorOn(network, command, id, netns string) types.Error {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runtimeWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.shimDir, "cninet-shim"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+id, "CNI_NETNS="+netns,
		"CNI_IFNAME=eth0", "CNI_PATH="+r.shimDir)
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"cniVersion": "1.1.0", "name": %q, "type": "cninet-shim", "socket": %q}`, network, r.socket))
	out, err := cmd.Output()
	if err == nil {
		r.t.Fatalf("cninet-shim %s succeeded, want an error: %s", command, out)
	}
	var cerr types.Error
	if jerr := json.Unmarshal(out, &cerr); jerr != nil {
		r.t.Fatalf("cninet-shim %s printed no CNI error (%v): %s", command, err, out)
	}
	return cerr
}

// portArgs is CAP_ARGS mapping hostPort to containerPort over TCP.
func portArgs(hostPort, containerPort int) []string {
	return []string{fmt.Sprintf(`CAP_ARGS={"portMappings": [{"hostPort": %d, "containerPort": %d, "protocol": "tcp"}]}`, hostPort, containerPort)}
}

// addResult parses cnitool add's output, which must be a result of
// version want naming an address, as a 1.0.0 result.
func addResult(t *testing.T, out, want string) *types100.Result {
	t.Helper()
	var head struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal([]byte(out), &head); err != nil {
		t.Fatalf("cnitool add printed no JSON result: %v: %s", err, out)
	}
	if head.CNIVersion != want {
		t.Fatalf("result has cniVersion %q, want the shim conflist's %q: %s", head.CNIVersion, want, out)
	}
	res, err := version.NewResult(head.CNIVersion, []byte(out))
	if err != nil {
		t.Fatalf("parsing the result: %v: %s", err, out)
	}
	cur, err := types100.GetResult(res)
	if err != nil {
		t.Fatalf("converting the result: %v: %s", err, out)
	}
	if len(cur.IPs) == 0 {
		t.Fatalf("result names no address: %s", out)
	}
	return cur
}

// post sends body to the daemon's socket with method, as the shim would,
// and returns the HTTP status and the answer's body.
func (r *thickRig) post(method string, body []byte) (int, []byte) {
	r.t.Helper()
	status, answer := r.tryPost(method, body)
	if status == 0 {
		r.t.Fatalf("%s to the daemon: %s", method, answer)
	}
	return status, answer
}

// tryPost is post for any goroutine: a request that gets no answer is
// status 0 with the error as the body.
func (r *thickRig) tryPost(method string, body []byte) (int, []byte) {
	client := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return net.Dial("unix", r.socket) },
	}}
	req, err := http.NewRequest(method, "http://cninet/cni", bytes.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, []byte(err.Error())
	}
	return resp.StatusCode, answer
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
