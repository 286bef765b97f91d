package main

import (
	"bufio"
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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet/internal/thick"
)

// lifecycleRig runs the daemon as systemd would, in temp dirs: the socket
// passed as fd 3 (socket activation), $NOTIFY_SOCKET to hear READY=1,
// JSON logs, a conf dir that starts empty, and a delegate plugin that
// answers VERSION.
type lifecycleRig struct {
	t                         *testing.T
	dir, socket, confDir, bin string
	metrics                   string
	watch                     string // --conf-watch-interval
	notify                    *net.UnixConn
	daemon                    *exec.Cmd
	exited                    chan error
	logMu                     sync.Mutex
	log                       bytes.Buffer
	client                    *http.Client
}

func newLifecycleRig(t *testing.T) *lifecycleRig {
	t.Helper()
	dir := t.TempDir()
	r := &lifecycleRig{t: t, dir: dir, watch: "50ms", socket: filepath.Join(dir, "run", "cninet.sock"), confDir: filepath.Join(dir, "delegates"), bin: filepath.Join(dir, "bin")}
	for _, d := range []string{filepath.Dir(r.socket), r.confDir, r.bin} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	plugin := "#!/bin/sh\n[ \"$CNI_COMMAND\" = VERSION ] && echo '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"1.0.0\"]}'\nexit 0\n"
	if err := os.WriteFile(filepath.Join(r.bin, "answers"), []byte(plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	notify := filepath.Join(dir, "notify")
	var err error
	if r.notify, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.notify.Close() })
	r.metrics = freeLoopbackPort(t)
	r.client = &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return net.Dial("unix", r.socket) },
	}}
	return r
}

func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// start runs the daemon with the socket it is handed as fd 3, as
// systemd's socket activation does: LISTEN_PID is set to the daemon's own
// pid by the shell that execs it.
func (r *lifecycleRig) start() {
	r.t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: r.socket, Net: "unix"})
	if err != nil {
		r.t.Fatal(err)
	}
	l.SetUnlinkOnClose(false) // systemd's socket file outlives each daemon
	f, err := l.File()
	l.Close()
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	self, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	r.daemon = exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, self, "daemon",
		"--socket", r.socket, "--conf-dir", r.confDir, "--cni-path", r.bin, "--cache-dir", filepath.Join(r.dir, "cache"),
		"--state-dir", filepath.Join(r.dir, "state"), "--metrics-listen", r.metrics, "--log-format", "json",
		"--conf-watch-interval", r.watch, "--drain-timeout", "5s")
	r.daemon.Env = append(os.Environ(), runMainEnv+"=1", "LISTEN_FDS=1", "NOTIFY_SOCKET="+r.notify.LocalAddr().String())
	r.daemon.ExtraFiles = []*os.File{f}
	r.daemon.Stderr = &lockedWriter{mu: &r.logMu, w: &r.log}
	if err := r.daemon.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.exited = make(chan error, 1)
	go func() { r.exited <- r.daemon.Wait() }()
	r.t.Cleanup(func() {
		if r.daemon != nil {
			r.daemon.Process.Kill()
			<-r.exited
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (r *lifecycleRig) logs() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.log.String()
}

// notified waits for the daemon's READY=1 on $NOTIFY_SOCKET.
func (r *lifecycleRig) notified(want string) {
	r.t.Helper()
	r.notify.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 256)
	for {
		n, err := r.notify.Read(buf)
		if err != nil {
			r.t.Fatalf("no %s on $NOTIFY_SOCKET: %v\n%s", want, err, r.logs())
		}
		if string(buf[:n]) == want {
			return
		}
	}
}

// request sends one CNI command for network web, as the shim does (with
// cniVersion 1.1.0, the first to have STATUS and GC).
func (r *lifecycleRig) request(command string) (int, types.Error) {
	r.t.Helper()
	conf := `{"cniVersion":"1.1.0","name":"web","type":"cninet-shim"}`
	body, err := json.Marshal(thick.Request{Protocol: thick.ProtocolVersion, Command: command, Config: json.RawMessage(conf)})
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := r.client.Post("http://cninet"+thick.RequestPath, "application/json", bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var cerr types.Error
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		json.Unmarshal(b, &cerr)
	}
	return resp.StatusCode, cerr
}

func (r *lifecycleRig) get(path string) (int, string) {
	r.t.Helper()
	resp, err := http.Get("http://" + r.metrics + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *lifecycleRig) writeConf() { r.writeConfOf("answers") }

// writeConfOf writes network web's delegate conflist with one plugin.
func (r *lifecycleRig) writeConfOf(plugin string) {
	conf := `{"cniVersion":"1.0.0","name":"web","plugins":[{"type":"` + plugin + `"}]}`
	if err := os.WriteFile(filepath.Join(r.confDir, "web.conflist"), []byte(conf), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// The daemon's life under systemd, with a conf dir that starts empty:
// socket activation, READY=1 once it serves, not ready (STATUS 50,
// /readyz 503) until a conflist appears, ready once the watch found it,
// one JSON log line per request, its meters with service.name beside
// its process's runtime metrics, and on
// SIGTERM a clean exit that leaves systemd's socket file and the conf
// dir alone.
func TestDaemonUnderSystemdWithAConfDirThatStartsEmpty(t *testing.T) {
	r := newLifecycleRig(t)
	r.start()
	r.notified("READY=1")

	if code, cerr := r.request(thick.CmdStatus); code == http.StatusOK || cerr.Code != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS with an empty conf dir: HTTP %d %+v, want code 50", code, cerr)
	}
	if code, body := r.get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no delegate conflist") {
		t.Fatalf("/readyz with an empty conf dir: %d %q, want 503 saying there is no conflist", code, body)
	}
	if code, _ := r.get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d, want 200: the daemon is alive though not ready", code)
	}

	r.writeConf()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := r.get("/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			_, body := r.get("/readyz")
			t.Fatalf("/readyz never became ready after the conflist appeared: %s\n%s", body, r.logs())
		}
	}
	if code, cerr := r.request(thick.CmdStatus); code != http.StatusOK {
		t.Fatalf("STATUS once the conflist is there: HTTP %d %+v", code, cerr)
	}

	if _, metrics := r.get("/metrics"); !strings.Contains(metrics, `service_name="cninet-daemon"`) ||
		!strings.Contains(metrics, "cninet_daemon_queue_wait_seconds_count") || !strings.Contains(metrics, "cninet_daemon_queue_depth") ||
		!strings.Contains(metrics, "cninet_daemon_requests_in_flight") {
		t.Fatalf("/metrics lacks service.name or the queue meters:\n%s", metrics)
	}
	_, metrics := r.get("/metrics")
	for _, want := range []string{"\ngo_goroutines ", "\ngo_memstats_heap_inuse_bytes ", "\ngo_gc_duration_seconds_count ",
		"\nprocess_resident_memory_bytes ", "\nprocess_open_fds ", "\nprocess_cpu_seconds_total ",
		`cninet_daemon_request_duration_seconds_count{command="STATUS",otel_scope_name="github.com/seed1280861d/cninet/cmd/cninet/daemon",otel_scope_version="",result="50"} 1`,
		`cninet_daemon_request_duration_seconds_count{command="STATUS",otel_scope_name="github.com/seed1280861d/cninet/cmd/cninet/daemon",otel_scope_version="",result="ok"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q (the process's health, each request's duration by command and result):\n%s", want, metrics)
		}
	}

	r.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.exited:
		r.daemon = nil
		if err != nil {
			t.Fatalf("exit on SIGTERM: %v\n%s", err, r.logs())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit within 30s of SIGTERM")
	}
	if fi, err := os.Lstat(r.socket); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("systemd's socket file after the daemon exited: %v, %v; want it left for the next activation", fi, err)
	}
	if _, err := os.Stat(filepath.Join(r.confDir, "web.conflist")); err != nil {
		t.Fatalf("the conflist after the drain: %v", err)
	}
	assertRequestLogLines(t, r.logs())
}

// assertRequestLogLines wants each request's line as JSON with every
// field an operator filters on.
func assertRequestLogLines(t *testing.T, logs string) {
	t.Helper()
	var statuses []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("a log line that is not JSON with --log-format json: %q", sc.Text())
		}
		if line["command"] == "STATUS" {
			statuses = append(statuses, line)
		}
	}
	if len(statuses) != 2 {
		t.Fatalf("%d log lines of STATUS requests, want one per request (2):\n%s", len(statuses), logs)
	}
	for _, key := range []string{"container_id", "netns", "ifname", "network", "owner", "duration", "code"} {
		if _, ok := statuses[1][key]; !ok {
			t.Errorf("the request's log line has no %q: %v", key, statuses[1])
		}
	}
	if fmt.Sprint(statuses[0]["code"]) != "50" || fmt.Sprint(statuses[1]["code"]) != "0" || statuses[1]["network"] != "web" {
		t.Errorf("log lines say code %v then %v in network %v, want 50 then 0 in web", statuses[0]["code"], statuses[1]["code"], statuses[1]["network"])
	}
}

// SIGHUP reloads the conf dir at once: with a watch that would not look
// for an hour, a delegate conflist changed to name a missing plugin makes
// STATUS fail only after the SIGHUP.
func TestDaemonReloadsOnSIGHUP(t *testing.T) {
	r := newLifecycleRig(t)
	r.watch = "1h"
	r.writeConf()
	r.start()
	r.notified("READY=1")
	if code, cerr := r.request(thick.CmdStatus); code != http.StatusOK {
		t.Fatalf("STATUS: HTTP %d %+v", code, cerr)
	}
	r.writeConfOf("not-installed")
	if code, cerr := r.request(thick.CmdStatus); code != http.StatusOK {
		t.Fatalf("STATUS before the SIGHUP: HTTP %d %+v, want the conflist loaded at start, still ready", code, cerr)
	}
	r.daemon.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, cerr := r.request(thick.CmdStatus)
		if code != http.StatusOK && cerr.Code == types.ErrPluginNotAvailable && strings.Contains(cerr.Msg, "not-installed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("STATUS after the SIGHUP: HTTP %d %+v, want code 50 naming the missing plugin\n%s", code, cerr, r.logs())
		}
	}
}
