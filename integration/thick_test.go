package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// A runtime (libcni's cnitool) drives the shim through a whole life:
// ADD with a port mapping reachable from the host side, CHECK, STATUS,
// DEL twice; then GC collects an attachment the runtime forgot. Nothing
// is left, and the daemon's metrics count what it served.
func TestThickCnitoolLifecycle(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newThickRig(t, set, "1.1.0", true)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		stop := serveHTTP(t, w, 8080, "thick-"+set.Name)
		res := addResult(t, r.mustCnitool(portArgs(28301, 8080), "add", r.name(), w.Path), "1.1.0")
		addr, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
		if !netip.MustParsePrefix(r.nw.cfg.IPv4Subnet).Contains(addr) {
			t.Fatalf("address %s is not in the delegate's subnet %s", addr, r.nw.cfg.IPv4Subnet)
		}
		if body, err := fetch(r.nw.gw4, 28301); err != nil || body != "hello from thick-"+set.Name {
			t.Fatalf("mapped port 28301 from the host side: %q, %v", body, err)
		}
		r.mustCnitool(nil, "check", r.name(), w.Path)
		r.mustCnitool(nil, "status", r.name(), w.Path)
		r.mustCnitool(portArgs(28301, 8080), "del", r.name(), w.Path)
		r.mustCnitool(portArgs(28301, 8080), "del", r.name(), w.Path)
		stop()
		assertNoLeaks(t, base, r.nw.allowance())

		// The runtime loses its cache: only the GC command can find the
		// attachment now.
		r.mustCnitool(portArgs(28302, 8080), "add", r.name(), w.Path)
		forgetRuntimeCache(t, r.name())
		r.mustCnitool(nil, "gc", r.name(), w.Path)
		assertNoLeaks(t, base, r.nw.allowance())
		assertMetrics(t, r.metrics, `cninet_daemon_requests_total{command="ADD",|result="ok"`, `cninet_daemon_requests_total{command="GC",|result="ok"`,
			`cninet_daemon_request_duration_seconds_bucket{command="DEL",`, `cninet_operations_total{cninet_operation="connect"`)
	})
}

// A runtime's GC of one network collects everything of that network not
// listed, and nothing of the same workload on another network of the same
// daemon: that attachment keeps answering on its mapped port, passes
// CHECK, and its DEL then leaves nothing.
func TestThickGCLeavesOtherNetworks(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newThickRig(t, set, "1.1.0", false)
		other := newNetwork(t, set, false)
		r.addNetwork(other, "1.1.0")
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		stop := serveHTTP(t, w, 8080, "gc-"+set.Name)
		eth1 := []string{"CNI_IFNAME=eth1"}
		r.mustCnitool(portArgs(28501, 8080), "add", r.name(), w.Path)
		r.mustCnitool(append(portArgs(28502, 8080), eth1...), "add", other.cfg.NetworkName, w.Path)
		forgetRuntimeCache(t, r.name())
		r.mustCnitool(nil, "gc", r.name(), w.Path)
		if body, err := fetch(other.gw4, 28502); err != nil || body != "hello from gc-"+set.Name {
			t.Fatalf("the other network's mapped port after GC: %q, %v", body, err)
		}
		r.mustCnitool(eth1, "check", other.cfg.NetworkName, w.Path)
		r.mustCnitool(append(portArgs(28502, 8080), eth1...), "del", other.cfg.NetworkName, w.Path)
		stop()
		allow := r.nw.allowance()
		allow.Chains = append(allow.Chains, other.allowance().Chains...)
		allow.Links = append(allow.Links, other.allowance().Links...)
		assertNoLeaks(t, base, allow)
	})
}

// forgetRuntimeCache removes the runtime's (cnitool's) cached results of
// network, as a runtime that lost its state would have.
func forgetRuntimeCache(t *testing.T, network string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("/var/lib/cni/results", network+"-cnitool-*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cached result of the runtime for network %s (%v)", network, err)
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
}

// assertMetrics wants, for every entry of want, a line of the daemon's
// /metrics holding each of its |-separated parts, and /healthz and
// /readyz to answer 200, /healthz with "ok" and cninet's version.
func assertMetrics(t *testing.T, addr string, want ...string) {
	t.Helper()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s answered %s, want 200", path, resp.Status)
		}
		if f := strings.Fields(string(body)); path == "/healthz" && (len(f) != 2 || f[0] != "ok") {
			t.Errorf("/healthz answered %q, want \"ok <version>\"", body)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, w := range want {
		if !hasLine(string(body), strings.Split(w, "|")) {
			t.Errorf("/metrics has no line with %q:\n%s", w, body)
		}
	}
}

// The daemon is SIGKILLed while a workload is attached and the workload's
// namespace is deleted: the runtime's DEL still succeeds (the shim runs
// it itself) and leaves nothing. An ADD meanwhile is "try again later"
// naming the socket. A restarted daemon (its stale socket replaced)
// serves CHECK and DEL of an attachment made before it restarted. The
// shim conflist is 0.4.0, as Podman writes them: results come back in
// 0.4.0.
func TestThickDaemonKilled(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newThickRig(t, set, "0.4.0", false)
		base := baseline(t)
		w1 := netsandbox.NewWorkload(t)
		addResult(t, r.mustCnitool(portArgs(28311, 8080), "add", r.name(), w1.Path), "0.4.0")
		r.kill()
		w1.Delete()
		w2 := netsandbox.NewWorkload(t)
		if cerr := r.shimError("ADD", "down-1", w2.Path); cerr.Code != 11 || !strings.Contains(cerr.Msg, r.socket) {
			t.Fatalf("ADD with the daemon down answered %+v, want code 11 naming %s", cerr, r.socket)
		}
		r.mustCnitool(portArgs(28311, 8080), "del", r.name(), w1.Path)
		assertNoLeaks(t, base, r.nw.allowance())

		r.start()
		addResult(t, r.mustCnitool(portArgs(28312, 8080), "add", r.name(), w2.Path), "0.4.0")
		r.kill()
		r.start()
		r.mustCnitool(nil, "check", r.name(), w2.Path)
		r.mustCnitool(portArgs(28312, 8080), "del", r.name(), w2.Path)
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// A stopped daemon (SIGSTOP: it accepts no connection, answers nothing)
// hangs no runtime: cnitool's DEL returns within seconds, the shim having
// run it itself, and leaves nothing; an ADD meanwhile is code 11 naming
// the socket. Once the daemon continues (SIGCONT) it finds the requests
// the shim gave up on and refuses them unrun (code 11 in its metrics): the
// late ADD attaches nothing, the late DEL undoes nothing, and a neighbour
// attached throughout keeps its mapped port and passes CHECK.
func TestThickStoppedDaemon(t *testing.T) {
	netsandbox.Require(t)
	set := netsandbox.PluginSets(t)[0]
	r := newThickRig(t, set, "1.1.0", true)
	base := baseline(t)
	neighbour := netsandbox.NewWorkload(t)
	stop := serveHTTP(t, neighbour, 8080, "neighbour")
	r.mustCnitool(portArgs(28601, 8080), "add", r.name(), neighbour.Path)
	withNeighbour := baseline(t)
	w1 := netsandbox.NewWorkload(t)
	r.mustCnitool(portArgs(28602, 8080), "add", r.name(), w1.Path)

	if err := r.daemon.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	daemon := r.daemon.Process
	continued := false
	cont := func() {
		if !continued {
			continued = true
			daemon.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(cont) // before the rig's cleanup stops the daemon
	start := time.Now()
	r.mustCnitool(portArgs(28602, 8080), "del", r.name(), w1.Path)
	took := time.Since(start)
	t.Logf("cnitool DEL with the daemon stopped returned after %s", took.Round(time.Millisecond))
	if took > 30*time.Second {
		t.Errorf("cnitool DEL with the daemon stopped took %s, want a few seconds past the silence limit", took)
	}
	assertNoLeaks(t, withNeighbour, r.nw.allowance())
	w2 := netsandbox.NewWorkload(t)
	start = time.Now()
	if cerr := r.shimError("ADD", "stopped-1", w2.Path); cerr.Code != 11 || !strings.Contains(cerr.Msg, r.socket) || !strings.Contains(cerr.Msg, "did not answer") {
		t.Fatalf("ADD with the daemon stopped answered %+v, want code 11 saying the daemon at %s did not answer", cerr, r.socket)
	}
	t.Logf("ADD with the daemon stopped gave up after %s", time.Since(start).Round(time.Millisecond))

	cont()
	waitForMetrics(t, r.metrics, `cninet_daemon_requests_total{command="ADD",|result="11"`, `cninet_daemon_requests_total{command="DEL",|result="11"`)
	assertNoLeaks(t, withNeighbour, r.nw.allowance())
	if body, err := fetch(r.nw.gw4, 28601); err != nil || body != "hello from neighbour" {
		t.Fatalf("the neighbour's mapped port after the daemon woke: %q, %v", body, err)
	}
	r.mustCnitool(nil, "check", r.name(), neighbour.Path)
	r.mustCnitool(portArgs(28601, 8080), "del", r.name(), neighbour.Path)
	stop()
	assertNoLeaks(t, base, r.nw.allowance())
}

// waitForMetrics waits up to 20s for the daemon's /metrics to hold a
// line with each of want's |-separated parts, for every entry of want.
func waitForMetrics(t *testing.T, addr string, want ...string) {
	t.Helper()
	var body []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		missing := false
		for _, w := range want {
			missing = missing || !hasLine(string(body), strings.Split(w, "|"))
		}
		if !missing {
			return
		}
	}
	t.Fatalf("/metrics did not come to hold %q within 20s:\n%s", want, body)
}

// 24 workloads are attached and detached at once through the shim; every
// one gets its own address, and nothing is left.
func TestThickConcurrentAddDel(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newThickRig(t, set, "1.0.0", false)
		base := baseline(t)
		const n = 24
		addrs := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			w := netsandbox.NewWorkload(t)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ports := portArgs(28400+i, 8080)
				out, errOut, err := r.cnitool(ports, "add", r.name(), w.Path)
				if err != nil {
					errs[i] = fmt.Errorf("add %d: %v: %s%s", i, err, out, errOut)
					return
				}
				var res struct {
					IPs []struct{ Address string } `json:"ips"`
				}
				json.Unmarshal([]byte(out), &res)
				if len(res.IPs) > 0 {
					addrs[i] = res.IPs[0].Address
				}
				if out, errOut, err := r.cnitool(ports, "del", r.name(), w.Path); err != nil {
					errs[i] = fmt.Errorf("del %d: %v: %s%s", i, err, out, errOut)
				}
			}()
		}
		wg.Wait()
		seen := map[string]bool{}
		for i := range n {
			if errs[i] != nil {
				t.Error(errs[i])
				continue
			}
			if addrs[i] == "" || seen[addrs[i]] {
				t.Errorf("workload %d got address %q (seen before: %v)", i, addrs[i], seen[addrs[i]])
			}
			seen[addrs[i]] = true
		}
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// Hostile and malformed requests straight on the socket each get a CNI
// error with the right code, change nothing, and leave the daemon serving.
func TestThickBadRequests(t *testing.T) {
	netsandbox.Require(t)
	set := netsandbox.PluginSets(t)[0]
	r := newThickRig(t, set, "1.1.0", false)
	base := baseline(t)
	w := netsandbox.NewWorkload(t)
	conf := func(name string) string {
		return fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"cninet-shim"}`, name)
	}
	request := func(id, netns, network string) string {
		return fmt.Sprintf(`{"protocol":1,"command":"ADD","containerID":%q,"netns":%q,"ifName":"eth0","config":%s}`, id, netns, conf(network))
	}
	cases := []struct {
		name, method, body string
		code               float64
	}{
		{"malformed JSON is a decoding failure", "POST", `{"command":`, 6},
		{"a body past the size limit is refused", "POST", `{"command":"ADD","args":"` + strings.Repeat("a", 2<<20) + `"}`, 4},
		{"a container id with ../ is refused", "POST", request("../../etc/passwd", w.Path, r.name()), 4},
		{"an unknown network is an invalid network config", "POST", request("bad-1", w.Path, "no-such-network"), 7},
		{"a netns that does not exist is refused on ADD", "POST", request("bad-2", "/run/netns/no-such-ns", r.name()), 4},
		{"a file that is no network namespace is refused on ADD", "POST", request("bad-3", "/proc/self/ns/mnt", r.name()), 4},
		{"a shim older than protocol numbers is refused", "POST", strings.Replace(request("bad-5", w.Path, r.name()), `"protocol":1,`, "", 1), 104},
		{"an unknown command is refused", "POST", strings.Replace(request("bad-4", w.Path, r.name()), `"ADD"`, `"EXPLODE"`, 1), 4},
		{"a GET is refused", "GET", "", 4},
		{"a config of a CNI version thick mode does not serve is an incompatible version", "POST",
			strings.Replace(request("bad-6", w.Path, r.name()), `"cniVersion":"1.1.0"`, `"cniVersion":"0.2.0"`, 1), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, answer := r.post(tc.method, []byte(tc.body))
			var cerr map[string]any
			if err := json.Unmarshal(answer, &cerr); err != nil {
				t.Fatalf("answer is no CNI error JSON: %v: %s", err, answer)
			}
			if status == http.StatusOK || cerr["code"] != tc.code || cerr["msg"] == "" {
				t.Fatalf("got HTTP %d %s, want a CNI error with code %v", status, answer, tc.code)
			}
		})
	}
	r.mustCnitool(nil, "status", r.name(), w.Path) // still serving
	assertNoLeaks(t, base, r.nw.allowance())
}

// STATUS of a shim network whose delegate names a plugin that is not
// installed is "plugin not available" (50), naming the plugin; ADD on it
// is an invalid network config and changes nothing.
func TestThickStatusOfABrokenDelegate(t *testing.T) {
	netsandbox.Require(t)
	r := newThickRig(t, netsandbox.PluginSets(t)[0], "1.1.0", false)
	writeFile(t, filepath.Join(r.confDir, "thick-broken.conflist"),
		`{"cniVersion": "1.0.0", "name": "thick-broken", "plugins": [{"type": "no-such-plugin"}]}`)
	base := baseline(t)
	if cerr := r.shimErrorOn("thick-broken", "STATUS", "", ""); cerr.Code != 50 || !strings.Contains(cerr.Msg, "no-such-plugin") {
		t.Fatalf("STATUS answered %+v, want code 50 naming no-such-plugin", cerr)
	}
	w := netsandbox.NewWorkload(t)
	if cerr := r.shimErrorOn("thick-broken", "ADD", "broken-1", w.Path); cerr.Code != 7 {
		t.Fatalf("ADD answered %+v, want code 7 (invalid network config)", cerr)
	}
	r.mustCnitool(nil, "status", r.name(), w.Path) // the working network stays ready
	assertNoLeaks(t, base, r.nw.allowance())
}

func hasLine(text string, parts []string) bool {
	for _, line := range strings.Split(text, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
