package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	goiptables "github.com/coreos/go-iptables/iptables"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"golang.org/x/sys/unix"
)

// One host, many owners (DESIGN.md, "The host registry"): Configurators
// of different owners on one network, in one process or two, sharing
// libcni's cache or not, never collect each other's live attachments; a
// host without iptables gets the backends the plugins really pick; and
// two processes tearing down one id take turns on the registry's id lock.

// ownersRunnerEnv, set in a child's environment, makes the test binary
// a runner that does what it names (an ownersRunner as JSON) and exits.
const ownersRunnerEnv = "CNINET_OWNERS_RUNNER"

// ownersRunner is what a runner child of this file is asked to do.
type ownersRunner struct {
	Mode         string // "gc", "teardown" or "repair"
	PrivateCache bool   // first mount a tmpfs of its own over /var/lib/cni (the child has a mount namespace of its own)
	ConfList     []byte
	PluginDirs   []string
	Delay        time.Duration // how long after Go the work starts
	Stop         string        // repair: a file whose appearance ends the repairs, after three more
	Owner        string
	Live         []string           // gc
	Dead         *cninet.Allocation // gc: set up first in Netns, then left for the GC to collect
	ID           string             // teardown
	Ports        []cninet.Port
	Netns        string
	Go           string // a file whose appearance starts the work, so that runners start together
	StateDir     string // the host registry ("": the default)
}

// runOwnersRunnerIfAsked runs this process as an ownersRunner child and
// exits when ownersRunnerEnv says so (TestMain calls it first).
func runOwnersRunnerIfAsked() {
	if spec := os.Getenv(ownersRunnerEnv); spec != "" {
		os.Exit(runOwnersRunner(spec))
	}
}

// runOwnersRunner is the child's whole life; it prints what it saw on
// stdout ("cached=N", "collected=ids") and returns its exit code.
func runOwnersRunner(spec string) int {
	fail := func(code int, err error) int {
		fmt.Fprintln(os.Stderr, "owners runner:", err)
		return code
	}
	var r ownersRunner
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		return fail(2, err)
	}
	if r.PrivateCache {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fail(2, err)
		}
		if err := unix.Mount("tmpfs", "/var/lib/cni", "tmpfs", 0, "mode=0755"); err != nil {
			return fail(2, err)
		}
	}
	results, _ := filepath.Glob("/var/lib/cni/results/*")
	fmt.Printf("cached=%d\n", len(results))
	c, err := cninet.New(cninet.Config{ConfList: r.ConfList, PluginDirs: r.PluginDirs, Owner: r.Owner, StateDir: r.StateDir})
	if err != nil {
		return fail(1, err)
	}
	defer c.Close()
	for end := time.Now().Add(time.Minute); r.Go != ""; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(r.Go); err == nil {
			break
		} else if time.Now().After(end) {
			return fail(2, errors.New("never told to go"))
		}
	}
	time.Sleep(r.Delay)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch r.Mode {
	case "gc":
		if r.Dead != nil {
			if _, err := c.Setup(ctx, r.Dead, r.Netns); err != nil {
				return fail(1, err)
			}
		}
		fmt.Printf("gc-begin=%d\n", time.Now().UnixNano())
		report, err := c.GC(ctx, r.Live)
		fmt.Printf("gc-end=%d\n", time.Now().UnixNano())
		if err != nil {
			return fail(1, err)
		}
		fmt.Printf("collected=%s\n", strings.Join(report.IDs(), ","))
	case "teardown":
		if err := c.Teardown(ctx, &cninet.Allocation{ID: r.ID, Ports: r.Ports}, r.Netns); err != nil {
			return fail(1, err)
		}
	case "repair":
		return repairUntil(ctx, c, r)
	default:
		return fail(2, fmt.Errorf("unknown mode %q", r.Mode))
	}
	return 0
}

// ownersRunnerCmd is a runner child doing r.
func ownersRunnerCmd(t *testing.T, r ownersRunner) *exec.Cmd {
	t.Helper()
	spec, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), ownersRunnerEnv+"="+string(spec))
	if r.PrivateCache {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	}
	return cmd
}

// newOwnedConfigurator is a Configurator of owner on conf, with the
// default StateDir and CacheDir (both tmpfs in the sandbox).
func newOwnedConfigurator(t *testing.T, set netsandbox.PluginSet, conf []byte, owner string, extraDirs ...string) *cninet.Configurator {
	t.Helper()
	c, err := cninet.New(cninet.Config{
		Logger:     hclog.New(&hclog.LoggerOptions{Name: owner, Level: hclog.Warn, Output: testWriter{t}}),
		ConfList:   conf,
		PluginDirs: append([]string{set.Dir}, extraDirs...),
		Owner:      owner,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// countRulesOf counts the firewall rules and chains of the attachment of
// id in network (rulesOf).
func countRulesOf(network, id string, addrs []netip.Addr) (int, error) {
	lines, err := rulesOf(network, id, addrs)
	return len(lines), err
}

// rulesOf returns the firewall rules and chains of the attachment of
// id in network: iptables and ip6tables lines naming its bridge
// masquerade or portmap chain (CNI-<h[:24]>, CNI-DN-<h[:21]>) or one of
// its addresses (masquerade, DNAT, firewall rules), and the nftables
// rules of the plugins' tables (cni_*) naming one of its addresses.
func rulesOf(network, id string, addrs []netip.Addr) ([]string, error) {
	sum := sha512.Sum512([]byte(network + id))
	h := hex.EncodeToString(sum[:])
	chains := []string{"CNI-" + h[:24], "CNI-DN-" + h[:21]}
	var pats []*regexp.Regexp
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		after := `([^0-9]|$)` // 198.18.5.2 in 198.18.5.2/32 or 198.18.5.2:8080, not in 198.18.5.20
		if a.Is6() {
			after = `([^0-9a-fA-F:]|$)`
		}
		pats = append(pats, regexp.MustCompile(`(^|[^0-9a-fA-F:.])`+regexp.QuoteMeta(a.String())+after))
	}
	var lines []string
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(hostTool(bin)).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", bin, err)
		}
		lines = append(lines, strings.Split(string(out), "\n")...)
	}
	if _, err := exec.LookPath("nft"); err == nil {
		out, err := exec.Command("nft", "list", "ruleset").Output()
		if err != nil {
			return nil, fmt.Errorf("nft list ruleset: %v", err)
		}
		inCNI := false
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[0] == "table" && f[3] == "{" {
				inCNI = strings.HasPrefix(f[2], "cni_") // not iptables-nft's own tables, listed above already
			}
			if inCNI {
				lines = append(lines, line)
			}
		}
	}
	var out []string
	for _, line := range lines {
		if slices.ContainsFunc(chains, func(c string) bool { return strings.Contains(line, c) }) ||
			slices.ContainsFunc(pats, func(p *regexp.Regexp) bool { return p.MatchString(line) }) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out, nil
}

// assertRecordedAs fails unless c's Attachments lists id in network as
// owner's (want true), or lists no record of id in network (want false).
func assertRecordedAs(t *testing.T, c *cninet.Configurator, when, id, network, owner string, want bool) {
	t.Helper()
	recs, err := c.Attachments()
	if err != nil {
		t.Fatalf("Attachments %s: %v", when, err)
	}
	var of []cninet.AttachmentRecord
	for _, r := range recs {
		if r.ID == id && r.Network == network {
			of = append(of, r)
		}
	}
	switch {
	case want && (len(of) != 1 || of[0].Owner != owner || of[0].Network != network || of[0].State != "attached"):
		t.Fatalf("Attachments %s: %s's records are %+v, want one, attached, in %s, of %s", when, id, of, network, owner)
	case !want && len(of) != 0:
		t.Fatalf("Attachments %s: %s's records are %+v, want none", when, id, of)
	}
}

// timedSample is one count, and when it was taken.
type timedSample struct {
	begin, end time.Time
	n          int
}

// timedSampler counts in a loop on a goroutine of its own, keeping every
// sample with its time, until finish.
type timedSampler struct {
	stop, done chan struct{}
	samples    []timedSample
	err        error
}

func watch(count func() (int, error)) *timedSampler {
	s := &timedSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			begin := time.Now()
			n, err := count()
			if err != nil {
				s.err = err
				return
			}
			s.samples = append(s.samples, timedSample{begin, time.Now(), n})
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}()
	return s
}

// finish stops counting and returns the least count of all samples, and
// how many samples were taken wholly between from and to.
func (s *timedSampler) finish(t *testing.T, what string, from, to time.Time) (least, within int) {
	t.Helper()
	close(s.stop)
	<-s.done
	if s.err != nil {
		t.Fatalf("counting %s: %v", what, s.err)
	}
	least = -1
	for _, x := range s.samples {
		if least < 0 || x.n < least {
			least = x.n
		}
		if !x.begin.Before(from) && !x.end.After(to) {
			within++
		}
	}
	return least, within
}

// assertNeverBelow stops counting and fails unless every sample counted
// want and at least one was taken wholly between from and to (the
// operation watched).
func (s *timedSampler) assertNeverBelow(t *testing.T, what string, want int, from, to time.Time) {
	t.Helper()
	least, within := s.finish(t, what, from, to)
	if within == 0 || least != want {
		t.Fatalf("%s: the least of %d samples (%d of them within the %s it ran) was %d, want %d at every instant",
			what, len(s.samples), within, to.Sub(from).Round(time.Millisecond), least, want)
	}
	t.Logf("%s: %d in each of %d samples, %d of them within the %s it ran", what, want, len(s.samples), within, to.Sub(from).Round(time.Millisecond))
}

// fetchNew is fetch over a connection of its own each time: a connection
// an earlier fetch left idle in http.DefaultTransport's pool is still
// translated by its conntrack entry after the port mapping is gone, and
// would answer for a mapping that no longer exists.
func fetchNew(addr netip.Addr, port int) (string, error) {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 2 * time.Second, Transport: tr}
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

// assertNoLeaksSettled is assertNoLeaks that gives a deleted namespace's
// veths a few seconds to go: the kernel destroys a network namespace, and
// the devices in it, asynchronously (here after a GC, whose DEL runs
// without the namespace, left them to go with it).
func assertNoLeaksSettled(t *testing.T, base netsandbox.Snapshot, allow netsandbox.Allowance) {
	t.Helper()
	var leaks []string
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		now, err := netsandbox.TakeSnapshot()
		if err != nil {
			t.Fatal(err)
		}
		if leaks = netsandbox.Leaks(base, now, allow); len(leaks) == 0 || time.Now().After(end) {
			break
		}
		if slices.ContainsFunc(leaks, func(l string) bool { return !strings.HasPrefix(l, "link veth") }) {
			break // only a veth may still be on its way out
		}
	}
	if len(leaks) > 0 {
		t.Fatalf("%d item(s) leaked:\n  %s", len(leaks), strings.Join(leaks, "\n  "))
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Two Configurators of different owners on one network and one host
// registry: runtime-b's GC, whose live set is its own, never takes
// anything of orchestrator-a's live a1 (its rules never fewer while the
// GC runs, its reservation, its port, its record), whether the two share
// libcni's cache (one process) or not (runtime-b is a process with a
// libcni cache of its own). orchestrator-a's own GC, told a1 is dead, does
// collect it: the same counting sees a removal.
func TestAnotherOwnersGCNeverTouchesALiveAttachmentOfTheSameNetwork(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		for _, cache := range []struct {
			name    string
			private bool
		}{
			{"sharing libcni's cache", false},
			{"each with a libcni cache of its own", true},
		} {
			t.Run(cache.name, func(t *testing.T) {
				nw := newNetwork(t, set, true)
				n, _ := strconv.Atoi(strings.TrimPrefix(nw.cfg.NetworkName, "it"))
				port := 28400 + 2*n // a host port of its own: a subtest that failed leaves no rule in the way
				a := newOwnedConfigurator(t, set, nw.conf, "orchestrator-a")
				base := baseline(t)
				wa := netsandbox.NewWorkload(t)
				a1 := &cninet.Allocation{ID: "a1", Ports: []cninet.Port{{Value: port, To: 8080}}}
				st, err := a.Setup(ctxFor(t, time.Minute), a1, wa.Path)
				if err != nil {
					t.Fatal(err)
				}
				stopA1 := serveHTTP(t, wa, 8080, "a1")
				if body, err := fetchNew(nw.gw4, port); err != nil || body != "hello from a1" {
					t.Fatalf("a1 through its host port before: %q, %v", body, err)
				}
				addrs := []netip.Addr{st.Address, st.AddressIPv6}
				count := func() (int, error) { return countRulesOf(nw.cfg.NetworkName, a1.ID, addrs) }
				before, err := count()
				if err != nil || before < 5 {
					t.Fatalf("a1's rules before: %d, %v; want at least 5 (masquerade, DNAT, firewall)", before, err)
				}
				reservation := filepath.Join(nw.cfg.IPAMDataDir, nw.cfg.NetworkName, st.Address.String())
				if !fileExists(reservation) {
					t.Fatalf("a1's reservation %s is missing after Setup", reservation)
				}
				cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", nw.cfg.NetworkName+"-a1-*"))
				if len(cached) == 0 {
					t.Fatal("a1 has no cached result in /var/lib/cni")
				}
				assertRecordedAs(t, a, "after Setup", "a1", nw.cfg.NetworkName, "orchestrator-a", true)

				var b *cninet.Configurator
				var wb *netsandbox.Workload
				b1 := &cninet.Allocation{ID: "b1", Ports: []cninet.Port{{Value: port + 1, To: 8080}}}
				bDead := &cninet.Allocation{ID: "b-dead", Ports: []cninet.Port{{Value: port + 1, To: 8080}}}
				wDead := netsandbox.NewWorkload(t)
				if !cache.private {
					// runtime-b in this process, with a live workload of its
					// own and a dead one, which its GC collects.
					b = newOwnedConfigurator(t, set, nw.conf, "runtime-b")
					wb = netsandbox.NewWorkload(t)
					if _, err := b.Setup(ctxFor(t, time.Minute), b1, wb.Path); err != nil {
						t.Fatal(err)
					}
					serveHTTP(t, wb, 8080, "b1")
					bDead.Ports = []cninet.Port{{Value: port + 2, To: 8080}}
					if _, err := b.Setup(ctxFor(t, time.Minute), bDead, wDead.Path); err != nil {
						t.Fatal(err)
					}
					wDead.Delete()
					s := watch(count)
					from := time.Now()
					report, err := b.GC(ctxFor(t, time.Minute), []string{"b1"})
					s.assertNeverBelow(t, "a1's rules while runtime-b's GC runs", before, from, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					if got := strings.Join(report.IDs(), ","); got != "b-dead" {
						t.Fatalf("runtime-b's GC collected %q, want its own b-dead only", got)
					}
					if body, err := fetchNew(nw.gw4, port+1); err != nil || body != "hello from b1" {
						t.Fatalf("b1 through its host port after its owner's GC: %q, %v", body, err)
					}
				} else {
					// runtime-b in a process of its own whose /var/lib/cni is
					// another tmpfs: it sees none of a's cached results.
					// It sets up b-dead, its own, and collects it.
					runner := ownersRunnerCmd(t, ownersRunner{Mode: "gc", PrivateCache: true, ConfList: nw.conf,
						PluginDirs: []string{set.Dir}, Owner: "runtime-b", Live: []string{}, Dead: bDead, Netns: wDead.Path})
					var stdout, stderr bytes.Buffer
					runner.Stdout, runner.Stderr = &stdout, &stderr
					s := watch(count)
					runErr := runner.Run()
					out := stdout.String()
					var begin, end int64
					for _, line := range strings.Split(out, "\n") {
						fmt.Sscanf(line, "gc-begin=%d", &begin)
						fmt.Sscanf(line, "gc-end=%d", &end)
					}
					s.assertNeverBelow(t, "a1's rules while runtime-b's GC runs in a process of its own", before, time.Unix(0, begin), time.Unix(0, end))
					if runErr != nil {
						t.Fatalf("runtime-b's runner: %v\n%s", runErr, stderr.String())
					}
					if !strings.Contains(out, "cached=0\n") || !strings.Contains(out, "collected=b-dead\n") {
						t.Fatalf("runtime-b's runner said %q, want it to see no cached result at first and collect its own b-dead only; stderr:\n%s", out, stderr.String())
					}
					if cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", nw.cfg.NetworkName+"-a1-*")); len(cached) == 0 {
						t.Fatal("a1's cached result in orchestrator-a's cache is gone after runtime-b's GC")
					}
				}
				if n, err := count(); err != nil || n != before {
					t.Fatalf("a1's rules after runtime-b's GC: %d, %v; want %d", n, err, before)
				}
				if !fileExists(reservation) {
					t.Fatalf("a1's reservation %s is gone after runtime-b's GC", reservation)
				}
				if body, err := fetchNew(nw.gw4, port); err != nil || body != "hello from a1" {
					t.Fatalf("a1 through its host port after runtime-b's GC: %q, %v", body, err)
				}
				if body, err := fetchNew(nw.gw6, port); err != nil || body != "hello from a1" {
					t.Fatalf("a1 through its host port after runtime-b's GC (IPv6): %q, %v", body, err)
				}
				assertRecordedAs(t, a, "after runtime-b's GC", "a1", nw.cfg.NetworkName, "orchestrator-a", true)

				t.Run("positive control: orchestrator-a's own GC collects a1", func(t *testing.T) {
					a2 := newOwnedConfigurator(t, set, nw.conf, "orchestrator-a")
					s := watch(count)
					from := time.Now()
					report, err := a2.GC(ctxFor(t, time.Minute), []string{})
					least, within := s.finish(t, "a1's rules during its owner's GC", from, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					if least >= before {
						t.Fatalf("a1's rules during its owner's GC: least %d of %d samples, want fewer than %d", least, len(s.samples), before)
					}
					t.Logf("a1's rules during its owner's GC: %d before, least %d in %d samples (%d within the GC)", before, least, len(s.samples), within)
					if got := strings.Join(report.IDs(), ","); got != "a1" {
						t.Fatalf("orchestrator-a's GC collected %q, want a1 (and not runtime-b's b1)", got)
					}
					if n, err := count(); err != nil || n != 0 {
						t.Fatalf("a1's rules after its owner's GC: %d, %v; want 0", n, err)
					}
					if fileExists(reservation) {
						t.Fatalf("a1's reservation %s is left after its owner's GC", reservation)
					}
					assertRecordedAs(t, a, "after orchestrator-a's GC", "a1", nw.cfg.NetworkName, "", false)
				})
				if b != nil {
					if body, err := fetchNew(nw.gw4, port+1); err != nil || body != "hello from b1" {
						t.Fatalf("b1 after orchestrator-a's GC: %q, %v", body, err)
					}
					assertRecordedAs(t, b, "after orchestrator-a's GC", "b1", nw.cfg.NetworkName, "runtime-b", true)
					if err := b.Teardown(ctxFor(t, time.Minute), b1, wb.Path); err != nil {
						t.Fatal(err)
					}
					wb.Delete()
				}
				wDead.Delete()
				stopA1()
				wa.Delete()
				assertNoLeaksSettled(t, base, nw.allowance())
			})
		}
	})
}

// upstreamSet is the upstream plugin set with no backend named.
func upstreamSet(t *testing.T) netsandbox.PluginSet { return pluginSetNamed(t, "upstream-v1.9.1") }

// pluginSetNamed is the installed plugin set of that name.
func pluginSetNamed(t *testing.T, name string) netsandbox.PluginSet {
	t.Helper()
	netsandbox.Require(t)
	for _, set := range netsandbox.PluginSets(t) {
		if set.Name == name {
			return set
		}
	}
	netsandbox.Unavailable(t, "the plugin set "+name+" is not installed (run scripts/install-deps.sh)")
	return netsandbox.PluginSet{}
}

// withoutFirewall is conf without the firewall plugin (it has only an
// iptables backend), failing if any plugin names a backend.
func withoutFirewall(t *testing.T, conf []byte) []byte {
	t.Helper()
	out := withoutPluginType(t, conf, "firewall")
	var list map[string]any
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list["plugins"].([]any) {
		pm := p.(map[string]any)
		if _, ok := pm["backend"]; ok {
			t.Fatalf("plugin %v names a backend", pm["type"])
		}
		if _, ok := pm["ipMasqBackend"]; ok {
			t.Fatalf("plugin %v names a backend", pm["type"])
		}
	}
	return out
}

// withoutPluginType is conf without its plugins of type typ, failing if
// it has none.
func withoutPluginType(t *testing.T, conf []byte, typ string) []byte {
	t.Helper()
	var list map[string]any
	if err := json.Unmarshal(conf, &list); err != nil {
		t.Fatal(err)
	}
	all := list["plugins"].([]any)
	var plugins []any
	for _, p := range all {
		if p.(map[string]any)["type"] != typ {
			plugins = append(plugins, p)
		}
	}
	if len(plugins) == len(all) {
		t.Fatalf("the conflist has no plugin %q", typ)
	}
	list["plugins"] = plugins
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pathWithoutIPTables sets PATH, for the rest of t, to a directory of
// links to every program of the current PATH except iptables and
// ip6tables under any of their names: the plugins and the cleaner alike
// look them up in PATH.
func pathWithoutIPTables(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, "iptables") || strings.HasPrefix(name, "ip6tables") || fileExists(filepath.Join(dir, name)) {
				continue
			}
			if err := os.Symlink(filepath.Join(d, name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", dir)
	for _, name := range []string{"iptables", "ip6tables", "iptables-save", "iptables-restore", "iptables-nft", "iptables-legacy"} {
		if p, err := exec.LookPath(name); err == nil {
			t.Fatalf("%s is still on PATH: %s", name, p)
		}
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft is not on PATH: %v", err)
	}
	for _, proto := range []goiptables.Protocol{goiptables.ProtocolIPv4, goiptables.ProtocolIPv6} {
		if _, err := goiptables.NewWithProtocol(proto); err == nil { // the cleaner's default opener
			t.Fatalf("go-iptables still finds iptables (protocol %v)", proto)
		}
	}
}

// On a host without iptables, upstream's bridge and portmap, told no
// backend, pick nftables by themselves. A workload on two such networks,
// each mapping its own host port, is disconnected from the first: the
// second network's hostport rules never drop at any instant, its port
// still answers, the first's are gone, and Teardown leaves nothing and
// needs no iptables. Positive control: portmap's own nftables DEL of the
// first network (the one cninet keeps from running) drops the second
// network's rules.
func TestWithoutIPTablesOnPATHDisconnectKeepsTheOtherNetworksPortMappingsAtEveryInstant(t *testing.T) {
	set := upstreamSet(t)
	n1, n2 := twoNetworks(t, set)
	n1.conf, n2.conf = withoutFirewall(t, n1.conf), withoutFirewall(t, n2.conf)
	iptablesSave, err := exec.LookPath("iptables-save")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline(t)
	t.Run("no iptables on PATH", func(t *testing.T) {
		pathWithoutIPTables(t)
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		w := netsandbox.NewWorkload(t)
		const id, port1, port2 = "nft-auto", 28420, 28421
		on1 := &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: port1, To: 8080}}, NetworkNames: []string{n1.cfg.NetworkName}}
		on2 := &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: port2, To: 8080}}, NetworkNames: []string{n2.cfg.NetworkName}}
		st1, err := c.Setup(ctxFor(t, time.Minute), on1, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		st2, err := c.Connect(ctxFor(t, time.Minute), on2, n2.cfg.NetworkName, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		addr1, addr2 := st1.Address, st2.Address
		serveHTTP(t, w, 8080, id)
		for _, via := range []struct {
			nw   network
			port int
		}{{n1, port1}, {n2, port2}} {
			if body, err := fetchNew(via.nw.gw4, via.port); err != nil || body != "hello from "+id {
				t.Fatalf("through %s's gateway port %d: %q, %v", via.nw.cfg.NetworkName, via.port, body, err)
			}
		}
		// The plugins really picked nftables: the hostport and masquerade
		// rules are in their nftables tables, and nothing names the
		// workload in iptables.
		for _, addr := range []netip.Addr{addr1, addr2} {
			if n, err := countHostportRules(id, addr); err != nil || n == 0 {
				t.Fatalf("portmap's nftables rules for %s: %d, %v; want some (the plugin did not pick nftables)", addr, n, err)
			}
		}
		if out, err := exec.Command("nft", "list", "table", "inet", "cni_plugins_masquerade").CombinedOutput(); err != nil ||
			!strings.Contains(string(out), addr1.String()) || !strings.Contains(string(out), addr2.String()) {
			t.Fatalf("bridge's nftables masquerade rules: %v\n%s", err, out)
		}
		if out, err := exec.Command(iptablesSave).Output(); err != nil || strings.Contains(string(out), addr1.String()) || strings.Contains(string(out), addr2.String()) {
			t.Fatalf("iptables names the workload (%v):\n%s", err, out)
		}

		before, err := countHostportRules(id, addr2)
		if err != nil {
			t.Fatal(err)
		}
		count2 := func() (int, error) { return countHostportRules(id, addr2) }
		sampleWhile(t, n2.cfg.NetworkName+"'s hostport rules during the Disconnect from "+n1.cfg.NetworkName, before, count2, func() {
			err = c.Disconnect(ctxFor(t, time.Minute), on1, n1.cfg.NetworkName, w.Path)
		})
		if err != nil {
			t.Fatalf("Disconnect without iptables: %v", err)
		}
		if n, err := countHostportRules(id, addr1); err != nil || n != 0 {
			t.Fatalf("%s's hostport rules after the Disconnect: %d, %v; want 0", n1.cfg.NetworkName, n, err)
		}
		if body, err := fetchNew(n2.gw4, port2); err != nil || body != "hello from "+id {
			t.Fatalf("through %s's gateway port %d after the Disconnect: %q, %v", n2.cfg.NetworkName, port2, body, err)
		}

		t.Run("positive control: portmap's own nftables DEL of the first network drops the second's rules", func(t *testing.T) {
			var list map[string]any
			if err := json.Unmarshal(n1.conf, &list); err != nil {
				t.Fatal(err)
			}
			var portmap []any
			for _, p := range list["plugins"].([]any) {
				if p.(map[string]any)["type"] == "portmap" {
					portmap = append(portmap, p)
				}
			}
			list["plugins"] = portmap
			raw, _ := json.Marshal(list)
			only, err := libcni.ConfListFromBytes(raw)
			if err != nil {
				t.Fatal(err)
			}
			lib := libcni.NewCNIConfigWithCacheDir([]string{set.Dir}, t.TempDir(), nil)
			rt := &libcni.RuntimeConf{ContainerID: id, NetNS: w.Path, IfName: "eth0", CapabilityArgs: map[string]any{
				"portMappings": []map[string]any{{"hostPort": port1, "containerPort": 8080, "protocol": "tcp"}}}}
			s := sample(count2)
			err = lib.DelNetworkList(ctxFor(t, time.Minute), only, rt)
			close(s.stop)
			<-s.done
			if err != nil {
				t.Fatal(err)
			}
			if s.err != nil || s.least >= before {
				t.Fatalf("%s's hostport rules during portmap's own DEL of %s: least %d of %d samples (%v), want fewer than %d",
					n2.cfg.NetworkName, n1.cfg.NetworkName, s.least, s.samples, s.err, before)
			}
			t.Logf("%s's hostport rules during portmap's own DEL of %s: %d before, least %d in %d samples", n2.cfg.NetworkName, n1.cfg.NetworkName, before, s.least, s.samples)
		})

		if err := c.Teardown(ctxFor(t, time.Minute), on2, w.Path); err != nil {
			t.Fatalf("Teardown without iptables: %v", err)
		}
		w.Delete()
	})
	assertNoLeaks(t, base, allowBoth(n1, n2))
}

// stampPlugin is a CNI plugin (a shell script) chained last, so first
// in a DEL: ADD passes the previous result through; each DEL appends
// "begin <pid> <ns>" to the file its conf names as "log", sleeps two
// seconds (long enough that two DELs not serialised overlap), and
// appends "end <pid> <ns>", pid being the process that ran the plugin.
const stampPlugin = `#!/bin/sh
conf=$(cat)
case "$CNI_COMMAND" in
ADD) printf '%s' "$conf" | jq -c '.prevResult + {cniVersion: .cniVersion}' ;;
DEL)
	log=$(printf '%s' "$conf" | jq -r .log)
	echo "begin $PPID $(date +%s%N)" >>"$log"
	sleep 2
	echo "end $PPID $(date +%s%N)" >>"$log"
	;;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}' ;;
esac
`

// stampSpan is one DEL of the stamp plugin: who ran it, and when.
type stampSpan struct {
	pid        int
	begin, end int64
}

// readStamps reads the stamp plugin's log into one span per DEL.
func readStamps(t *testing.T, path string) []stampSpan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open := map[int]int64{}
	var spans []stampSpan
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var what string
		var pid int
		var at int64
		if _, err := fmt.Sscanf(sc.Text(), "%s %d %d", &what, &pid, &at); err != nil {
			t.Fatalf("stamp log line %q: %v", sc.Text(), err)
		}
		switch what {
		case "begin":
			open[pid] = at
		case "end":
			spans = append(spans, stampSpan{pid, open[pid], at})
			delete(open, pid)
		}
	}
	if len(open) > 0 {
		t.Fatalf("DELs that never ended: %v", open)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].begin < spans[j].begin })
	return spans
}

// Two processes tear down the same allocation at the same moment (a
// runtime's DEL and the CLI's, say): both succeed, both run their DELs,
// nothing is left, and the registry's id lock makes them take turns: no
// plugin DEL of one overlaps one of the other's. The positive control:
// two runners that do not share the registry (each a state directory of
// its own, so no lock in common) tearing down another allocation at the
// same moment overlap.
func TestTwoProcessesTearingDownOneIDAtOnceTakeTurnsAndLeaveNothing(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		if _, err := exec.LookPath("jq"); err != nil {
			netsandbox.Unavailable(t, "jq is not installed (the stamp plugin needs it)")
		}
		stampDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(stampDir, "stamp"), []byte(stampPlugin), 0o755); err != nil {
			t.Fatal(err)
		}
		nw := newNetwork(t, set, true)
		base := baseline(t)
		tearDownTwice := func(id string, port int, stateDirs [2]string) (spans []stampSpan, pids map[int]bool) {
			t.Helper()
			logPath := filepath.Join(t.TempDir(), "stamps")
			conf := withPlugin(t, nw.conf, map[string]any{"type": "stamp", "log": logPath})
			c := newOwnedConfigurator(t, set, conf, "two-runners", stampDir)
			w := netsandbox.NewWorkload(t)
			alloc := &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: port, To: 8080}}}
			st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := countRulesOf(nw.cfg.NetworkName, alloc.ID, []netip.Addr{st.Address, st.AddressIPv6}); err != nil || n == 0 {
				t.Fatalf("the allocation's rules after Setup: %d, %v", n, err)
			}
			goFile := filepath.Join(t.TempDir(), "go")
			runners := make([]*exec.Cmd, 2)
			outs := make([]*bytes.Buffer, 2)
			for i := range runners {
				runners[i] = ownersRunnerCmd(t, ownersRunner{Mode: "teardown", ConfList: conf, PluginDirs: []string{set.Dir, stampDir},
					Owner: "two-runners", ID: alloc.ID, Ports: alloc.Ports, Netns: w.Path, Go: goFile, StateDir: stateDirs[i]})
				outs[i] = &bytes.Buffer{}
				runners[i].Stdout, runners[i].Stderr = outs[i], outs[i]
				if err := runners[i].Start(); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(500 * time.Millisecond) // both have started (they wait for goFile after New)
			if err := os.WriteFile(goFile, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			pids = map[int]bool{}
			for i, r := range runners {
				if err := r.Wait(); err != nil && stateDirs == [2]string{} {
					t.Errorf("runner %d (pid %d): %v\n%s", i, r.Process.Pid, err, outs[i])
				}
				pids[r.Process.Pid] = true
			}
			spans = readStamps(t, logPath)
			ran := map[int]bool{}
			for _, s := range spans {
				if !pids[s.pid] {
					t.Fatalf("a DEL by pid %d, not a runner's (%v)", s.pid, pids)
				}
				ran[s.pid] = true
			}
			if len(ran) != 2 {
				t.Fatalf("DELs ran in %d of the 2 runners (%v): want both to run theirs", len(ran), spans)
			}
			if stateDirs != [2]string{} { // the control: clean up after it, whatever the runners did
				if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
			}
			assertRecordedAs(t, c, "after both Teardowns", alloc.ID, nw.cfg.NetworkName, "", false)
			if n, err := countRulesOf(nw.cfg.NetworkName, alloc.ID, []netip.Addr{st.Address, st.AddressIPv6}); err != nil || n != 0 {
				t.Fatalf("the allocation's rules after both Teardowns: %d, %v", n, err)
			}
			w.Delete()
			return spans, pids
		}
		overlap := func(spans []stampSpan) string {
			for i, s := range spans {
				if i > 0 && s.begin < spans[i-1].end && s.pid != spans[i-1].pid {
					return fmt.Sprintf("pid %d's from %d to %d, pid %d's from %d to %d", spans[i-1].pid, spans[i-1].begin, spans[i-1].end, s.pid, s.begin, s.end)
				}
			}
			return ""
		}

		spans, _ := tearDownTwice("twice", 28430, [2]string{})
		if o := overlap(spans); o != "" {
			t.Fatalf("the DELs of the two runners overlapped: %s", o)
		}
		var desc []string
		for _, s := range spans {
			desc = append(desc, strconv.Itoa(s.pid)+": "+time.Duration(s.end-s.begin).Round(time.Millisecond).String())
		}
		t.Logf("DELs one after another: %s", strings.Join(desc, ", "))

		spans, _ = tearDownTwice("twice-unlocked", 28431, [2]string{t.TempDir(), t.TempDir()})
		if overlap(spans) == "" {
			t.Fatalf("the positive control: two runners sharing no registry did not overlap (%v); the check cannot see an overlap", spans)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}
