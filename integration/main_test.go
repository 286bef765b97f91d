package integration

import (
	"context"
	"fmt"
	"github.com/sasha-s/go-deadlock"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/cririg"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestMain(m *testing.M) {
	// Under -race go-cni guards itself with go-deadlock, whose goroutine ids
	// read 0 on this Go release: every pair of concurrent Setups then looks
	// like one goroutine locking twice, and the detector exits the process.
	deadlock.Opts.Disable = true
	if spec := os.Getenv(crashRunnerEnv); spec != "" { // a runner child of crash_test.go, already in the sandbox
		os.Exit(runCrashRunner(spec))
	}
	runOwnersRunnerIfAsked()       // a runner child of owners_test.go, already in the sandbox
	cririg.RunRuncWrapperIfAsked() // containerd runs the test binary as its runc (thick_cri_rig_test.go)
	netsandbox.Main(m)
}

// network is one test's CNI network: its own name, bridge and subnets,
// so tests cannot see each other's state.
type network struct {
	cfg  cninet.BridgeConfig
	conf []byte
	gw4  netip.Addr
	gw6  netip.Addr
}

var networkSeq atomic.Int32

// subnet24 is the first three octets of test network n's /24: the suite's
// 198.18.0.0/15 holds 511 of them (198.18.1 to 198.19.255).
func subnet24(t testing.TB, n int32) string {
	t.Helper()
	if n < 1 || n > 511 {
		t.Fatalf("test network %d: 198.18.0.0/15 holds /24s for networks 1 to 511 only", n)
	}
	return fmt.Sprintf("198.%d.%d", 18+n/256, n%256)
}

func newNetwork(t *testing.T, set netsandbox.PluginSet, dualStack bool) network {
	t.Helper()
	n := networkSeq.Add(1)
	cfg := cninet.DefaultBridgeConfig()
	cfg.Backend = set.Backend
	cfg.NetworkName = fmt.Sprintf("it%d", n)
	cfg.BridgeName = fmt.Sprintf("itbr%d", n)
	cfg.AdminChainName = "CNINET-TEST-ADMIN"
	cfg.IPv4Subnet = subnet24(t, n) + ".0/24"
	cfg.IPAMDataDir = "/run/cni"
	nw := network{cfg: cfg, gw4: netip.MustParseAddr(subnet24(t, n) + ".1")}
	if dualStack {
		cfg.IPv6Subnet = fmt.Sprintf("fd00:198:18:0:%x::/80", n)
		nw.cfg = cfg
		nw.gw6 = netip.MustParseAddr(fmt.Sprintf("fd00:198:18:0:%x::1", n))
	}
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nw.conf = conf
	return nw
}

// gateways are the network's gateways: IPv4's, and IPv6's on a
// dual-stack network.
func (n network) gateways() []netip.Addr {
	if n.gw6.IsValid() {
		return []netip.Addr{n.gw4, n.gw6}
	}
	return []netip.Addr{n.gw4}
}

func (n network) allowance() netsandbox.Allowance {
	return netsandbox.Allowance{Chains: []string{n.cfg.AdminChainName}, Links: []string{n.cfg.BridgeName}}
}

func newConfigurator(t *testing.T, set netsandbox.PluginSet, conf []byte, extraDirs ...string) *cninet.Configurator {
	t.Helper()
	c, err := cninet.New(cninet.Config{
		Logger:     hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.Warn, Output: testWriter{t}}),
		ConfList:   conf,
		PluginDirs: append([]string{set.Dir}, extraDirs...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// eachPluginSet runs test once per installed plugin set.
func eachPluginSet(t *testing.T, test func(t *testing.T, set netsandbox.PluginSet)) {
	netsandbox.Require(t)
	for _, set := range netsandbox.PluginSets(t) {
		t.Run(set.Name, func(t *testing.T) { test(t, set) })
	}
}

// baseline snapshots the host before a scenario; assertNoLeaks compares.
func baseline(t *testing.T) netsandbox.Snapshot {
	t.Helper()
	s, err := netsandbox.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func assertNoLeaks(t *testing.T, base netsandbox.Snapshot, allow netsandbox.Allowance) {
	t.Helper()
	now, err := netsandbox.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if leaks := netsandbox.Leaks(base, now, allow); len(leaks) > 0 {
		t.Fatalf("%d item(s) leaked:\n  %s", len(leaks), strings.Join(leaks, "\n  "))
	}
}

// serveHTTP answers "hello from <name>" on port inside the workload's
// namespace until the test ends or stop is called. The listening socket
// keeps the namespace (and so its veth) alive: stop it before deleting a
// namespace whose veth must go with it.
func serveHTTP(t *testing.T, w *netsandbox.Workload, port int, name string) (stop func()) {
	t.Helper()
	var ln net.Listener
	err := w.NS.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port)) // the socket stays in this namespace
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(rw, "hello from %s", name)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return func() { srv.Close() }
}

// fetch GETs http://addr:port/ from the sandbox's host side, retrying
// briefly while the path settles (IPv6 duplicate address detection). Each
// try opens a connection of its own: one an earlier fetch left idle in
// http.DefaultTransport's pool would still answer through its conntrack
// entry after the DNAT rule that made it was deleted, so a check after a
// teardown, a GC or a Disconnect could not fail.
func fetch(addr netip.Addr, port int) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	url := "http://" + netip.AddrPortFrom(addr, uint16(port)).String() + "/"
	var lastErr error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get(url)
		if err != nil {
			lastErr = err
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(body), err
	}
	return "", lastErr
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

// suitePATH is PATH as the suite started: pathWithoutIPTables takes
// iptables off PATH for cninet and the plugins, and the tests still read
// the host's rules through hostTool.
var suitePATH = os.Getenv("PATH")

// hostTool is the path of the program name on the suite's own PATH (name
// itself where it is not, for exec to report).
func hostTool(name string) string {
	for _, dir := range filepath.SplitList(suitePATH) {
		p := filepath.Join(dir, name)
		if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}
