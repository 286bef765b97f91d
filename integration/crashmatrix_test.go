package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sasha-s/go-deadlock"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// crashMatrixRunnerEnv, set in a child's environment, makes the test
// binary a runner that does what it names (a matrixRunner as JSON) and
// exits; init looks for it, so TestMain is not involved.
const crashMatrixRunnerEnv = "CNINET_CRASH_MATRIX_RUNNER"

func init() {
	if spec := os.Getenv(crashMatrixRunnerEnv); spec != "" { // a runner child, already in the sandbox
		deadlock.Opts.Disable = true // see TestMain
		os.Exit(runMatrixRunner(spec))
	}
}

// matrixRunner is what a runner child process is asked to do.
type matrixRunner struct {
	Op         string // Setup, Teardown, Connect, Disconnect, GC or Repair (Check with CheckOptions.Repair)
	ConfList   []byte
	ConfLists  [][]byte
	PluginDirs []string
	Owner      string
	Alloc      cninet.Allocation
	Netns      string
	Network    string   // Connect, Disconnect
	Live       []string // GC
}

func matrixConfig(r matrixRunner) cninet.Config {
	return cninet.Config{ConfList: r.ConfList, ConfLists: r.ConfLists, PluginDirs: r.PluginDirs, Owner: r.Owner,
		Retry: cninet.RetryPolicy{Attempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond}}
}

// runMatrixRunner is the child's whole life; it returns its exit code.
func runMatrixRunner(spec string) int {
	var r matrixRunner
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		fmt.Fprintln(os.Stderr, "matrix runner:", err)
		return 2
	}
	c, err := cninet.New(matrixConfig(r))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = r.do(ctx, c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrix runner:", err)
		return 1
	}
	return 0
}

func (r matrixRunner) do(ctx context.Context, c *cninet.Configurator) error {
	switch r.Op {
	case "Setup":
		_, err := c.Setup(ctx, &r.Alloc, r.Netns)
		return err
	case "Teardown":
		return c.Teardown(ctx, &r.Alloc, r.Netns)
	case "Connect":
		_, err := c.Connect(ctx, &r.Alloc, r.Network, r.Netns)
		return err
	case "Disconnect":
		return c.Disconnect(ctx, &r.Alloc, r.Network, r.Netns)
	case "GC":
		_, err := c.GC(ctx, r.Live)
		return err
	case "Repair":
		// The iptables and nft commands this process runs itself, not
		// its plugins, are its own rule writes: killwrap counts those.
		os.Setenv("KILLWRAP_RUNNER", strconv.Itoa(os.Getpid()))
		return c.Check(ctx, &r.Alloc, r.Netns, cninet.CheckOptions{Repair: true})
	}
	return fmt.Errorf("unknown operation %q", r.Op)
}

// crashMatrixOps are the operations of the matrix, in order.
var crashMatrixOps = []string{"Setup", "Teardown", "Connect", "Disconnect", "GC"}

// crashMatrixKs are the ks run for op, whose uninterrupted run logged
// the plugin commands in log (killwrap's lines, "<n> <command> <plugin>
// <id> <exit code>"): every k for Teardown and Disconnect, and with
// CNINET_CRASH_MATRIX=full for every operation; otherwise the first and
// the last command, the middle one, and for Setup the failed ADD and the
// first DEL of its retry (the attachment that was never cached).
func crashMatrixKs(op string, log []string) []int {
	n := len(log)
	if os.Getenv("CNINET_CRASH_MATRIX") == "full" || op == "Teardown" || op == "Disconnect" {
		ks := make([]int, n)
		for i := range ks {
			ks[i] = i + 1
		}
		return ks
	}
	pick := map[int]bool{1: true, (n + 1) / 2: true, n: true}
	for i, line := range log {
		if f := strings.Fields(line); len(f) == 5 && f[4] != "0" && i+2 <= n {
			pick[i+1], pick[i+2] = true, true
		}
	}
	var ks []int
	for k := 1; k <= n; k++ {
		if pick[k] {
			ks = append(ks, k)
		}
	}
	return ks
}

// crashMatrix is one plugin set's rig: two networks, the plugins wrapped
// by killwrap, and the live neighbours.
type crashMatrix struct {
	t          *testing.T
	n1, n2     network
	pluginDirs []string
	failDir    string // failonce's state: a file per id whose first ADD passes
	owner      string
	nft        bool // the plugins use their nftables backends
	neighbours []*cninet.Allocation
	nbPorts    []int
	nbAddrs    []string
	base       netsandbox.Snapshot
}

// killwrapDir is a directory of plugins that are killwrap under the names
// of the chains' plugins, finding the real ones in realDirs.
func killwrapDir(t *testing.T, realDirs []string) string {
	t.Helper()
	bin := filepath.Join(netsandbox.BuildPlugin(t, "killwrap"), "killwrap")
	dir := t.TempDir()
	for _, name := range []string{"loopback", "bridge", "firewall", "portmap", "failonce"} {
		if err := os.Symlink(bin, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "killwrap.path"), []byte(strings.Join(realDirs, ":")), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newCrashMatrix(t *testing.T, set netsandbox.PluginSet) *crashMatrix {
	t.Helper()
	m := &crashMatrix{t: t, failDir: t.TempDir(), owner: "crash-matrix", nft: set.Backend == "nftables"}
	m.n1, m.n2 = twoNetworks(t, set)
	m.n2.conf = withPlugin(t, m.n2.conf, map[string]any{"type": "failonce", "stateDir": m.failDir})
	realDirs := []string{set.Dir, netsandbox.BuildPlugin(t, "failonce")}
	m.pluginDirs = append([]string{killwrapDir(t, realDirs)}, realDirs...)

	c := m.configurator(t)
	for i, nw := range []network{m.n1, m.n2} {
		id := fmt.Sprintf("cm-neighbour-%d", i+1)
		m.passFailonce(id)
		w := netsandbox.NewWorkload(t)
		port := hostPort(nw.cfg.NetworkName, 0)
		alloc := &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: port, To: 8080}}, NetworkNames: []string{nw.cfg.NetworkName}}
		st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, w, 8080, id)
		m.neighbours = append(m.neighbours, alloc)
		m.nbPorts = append(m.nbPorts, port)
		m.nbAddrs = append(m.nbAddrs, st.Address.String())
		t.Cleanup(func() {
			if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
				t.Error(err)
			}
		})
	}
	m.assertNeighboursServed(t, "before the matrix")
	m.base = baseline(t)
	return m
}

// configurator is a Configurator of the matrix's owner knowing both
// networks (the first the default), as the runner child's.
func (m *crashMatrix) configurator(t *testing.T) *cninet.Configurator {
	t.Helper()
	cfg := matrixConfig(matrixRunner{ConfList: m.n1.conf, ConfLists: [][]byte{m.n2.conf}, PluginDirs: m.pluginDirs, Owner: m.owner})
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.Warn, Output: testWriter{t}})
	c, err := cninet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// passFailonce makes failonce pass the first ADD of id.
func (m *crashMatrix) passFailonce(id string) {
	m.t.Helper()
	if err := os.WriteFile(filepath.Join(m.failDir, id), nil, 0o644); err != nil {
		m.t.Fatal(err)
	}
}

// neighbourLines counts the lines of iptables-save, and with the
// nftables backends of the nftables ruleset, that name a neighbour's id or
// address: their masquerade, firewall and hostport rules.
func (m *crashMatrix) neighbourLines() (int, error) {
	var ids []string
	for _, nb := range m.neighbours {
		ids = append(ids, nb.ID)
	}
	return m.linesNaming(ids, m.nbAddrs)
}

// linesNaming counts the lines of iptables-save (the networks are IPv4
// only), and with the nftables backends of the nftables ruleset, that
// name any of ids or addrs.
func (m *crashMatrix) linesNaming(ids, addrs []string) (int, error) {
	var pats []string
	for _, id := range ids {
		pats = append(pats, regexp.QuoteMeta(id))
	}
	for _, a := range addrs {
		pats = append(pats, `(^|[^0-9.])`+regexp.QuoteMeta(a)+`($|[^0-9])`)
	}
	re := regexp.MustCompile(strings.Join(pats, "|"))
	cmds := [][]string{{"iptables-save"}}
	if m.nft {
		cmds = append(cmds, []string{"nft", "list", "ruleset"})
	}
	// Both listings at once: a sample must fit in the shortest runner's
	// life (one plugin command) to count as taken while it ran.
	counts, errs := make([]int, len(cmds)), make([]error, len(cmds))
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := exec.Command(cmd[0], cmd[1:]...).Output()
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", strings.Join(cmd, " "), err)
				return
			}
			for _, line := range strings.Split(string(out), "\n") {
				if re.MatchString(line) {
					counts[i]++
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	for i := range cmds {
		if errs[i] != nil {
			return 0, errs[i]
		}
		n += counts[i]
	}
	return n, nil
}

func (m *crashMatrix) assertNeighboursServed(t *testing.T, when string) {
	t.Helper()
	for i, nw := range []network{m.n1, m.n2} {
		assertReachable(t, when, m.nbPorts[i], m.neighbours[i].ID, nw.gw4)
	}
}

// departed is the allocation op acts on, set up (and, for GC, left dead)
// by the test process before the runner starts.
func (m *crashMatrix) departed(t *testing.T, op string, k int) (*cninet.Allocation, *netsandbox.Workload, string) {
	t.Helper()
	id := fmt.Sprintf("cm-%s-%d", strings.ToLower(op), k)
	if k < 0 {
		id = fmt.Sprintf("cm-%s-returned", strings.ToLower(op))
	}
	alloc := &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: hostPort(m.n1.cfg.NetworkName, 1), To: 8080}},
		NetworkNames: []string{m.n1.cfg.NetworkName, m.n2.cfg.NetworkName}}
	if op == "Connect" {
		alloc.NetworkNames = nil // the default network, then Connect of the second
	}
	w := netsandbox.NewWorkload(t)
	if op == "Setup" {
		return alloc, w, "" // failonce fails its first ADD on the second network: Setup retries
	}
	m.passFailonce(id)
	st, err := m.configurator(t).Setup(ctxFor(t, time.Minute), alloc, w.Path)
	if err != nil {
		t.Fatal(err)
	}
	second := ""
	if len(st.Attachments) == 2 {
		second = st.Attachments[1].Address.String()
	}
	if op == "GC" {
		if err := w.Delete(); err != nil {
			t.Fatal(err)
		}
	}
	return alloc, w, second
}

// cell runs op in a runner killed after its k-th plugin command (never
// when k is 0; for a Disconnect, k = -n is its last command n, with
// libcni's cache of the departed network dropped as libcni does when the
// DEL returned, and the restarted runner first disconnects again and
// finds no rule naming the departed network's address left), then the
// restarted runner's Teardown and GC, and checks
// that nothing of the departed allocation is left and the neighbours
// never lost a rule. It returns the log of the plugin commands the runner
// ran.
func (m *crashMatrix) cell(t *testing.T, op string, k int) []string {
	t.Helper()
	alloc, w, second := m.departed(t, op, k)
	returned := k < 0
	if returned {
		k = -k
	}
	want, err := m.neighbourLines()
	if err != nil {
		t.Fatal(err)
	}
	if want == 0 {
		t.Fatal("no rule names the neighbours")
	}

	wrapDir := t.TempDir()
	spec, err := json.Marshal(matrixRunner{Op: op, ConfList: m.n1.conf, ConfLists: [][]byte{m.n2.conf}, PluginDirs: m.pluginDirs,
		Owner: m.owner, Alloc: *alloc, Netns: w.Path, Network: m.n2.cfg.NetworkName,
		Live: []string{m.neighbours[0].ID, m.neighbours[1].ID}})
	if err != nil {
		t.Fatal(err)
	}
	runner := exec.Command(os.Args[0], "-test.run=^$")
	samples := filepath.Join(wrapDir, "samples")
	runner.Env = append(os.Environ(), crashMatrixRunnerEnv+"="+string(spec), "KILLWRAP_DIR="+wrapDir, "KILLWRAP_KILL_AT="+strconv.Itoa(k),
		"KILLWRAP_AWAIT_SAMPLES="+samples)
	if returned {
		runner.Env = append(runner.Env, "KILLWRAP_DROP_CACHE=1")
	}
	var stderr bytes.Buffer
	runner.Stderr = &stderr
	var runErr error
	sampleWhile(t, "the neighbours' rules while the runner runs "+op, want, countedIn(samples, m.neighbourLines), func() { runErr = runner.Run() })
	waitForPlugins(t, wrapDir)
	log, _ := os.ReadFile(filepath.Join(wrapDir, "log"))
	commands := strings.Split(strings.TrimSuffix(string(log), "\n"), "\n")
	if len(log) == 0 {
		commands = nil
	}
	var exit *exec.ExitError
	switch {
	case k == 0 && runErr != nil:
		t.Fatalf("the uninterrupted %s failed: %v; stderr:\n%s", op, runErr, stderr.String())
	case k > 0 && (!errors.As(runErr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL):
		t.Fatalf("the runner ended with %v, want killed by SIGKILL after plugin command %d; plugin commands:\n%s\nstderr:\n%s", runErr, k, log, stderr.String())
	case k > 0:
		t.Logf("killed after command %d of %s: %s", k, op, commands[k-1])
	}
	m.assertNeighboursServed(t, fmt.Sprintf("after the runner's %s (k=%d)", op, k))

	c := m.configurator(t)
	if returned {
		sampleWhile(t, "the neighbours' rules during the restarted runner's Disconnect", want, m.neighbourLines, func() {
			runErr = c.Disconnect(ctxFor(t, time.Minute), alloc, m.n2.cfg.NetworkName, w.Path)
		})
		if runErr != nil {
			t.Fatalf("the restarted runner's Disconnect: %v", runErr)
		}
		if left, err := m.linesNaming(nil, []string{second}); err != nil || left != 0 {
			t.Fatalf("after the restarted runner's Disconnect, %d rule line(s) still name %s's address %s in %s (%v)", left, alloc.ID, second, m.n2.cfg.NetworkName, err)
		}
	}
	sampleWhile(t, "the neighbours' rules during the restarted runner's Teardown and GC", want, m.neighbourLines, func() {
		if runErr = c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); runErr != nil {
			return
		}
		_, runErr = c.GC(ctxFor(t, time.Minute), []string{m.neighbours[0].ID, m.neighbours[1].ID})
	})
	if runErr != nil {
		t.Fatalf("the restarted runner: %v", runErr)
	}
	if err := w.Delete(); err != nil {
		t.Fatal(err)
	}
	atts, err := c.Attachments()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts {
		if a.ID == alloc.ID {
			t.Errorf("the registry still records %s in %s (%s)", a.ID, a.Network, a.State)
		}
	}
	assertNoLeaks(t, m.base, allowBoth(m.n1, m.n2))
	m.assertNeighboursServed(t, fmt.Sprintf("after the restarted runner (%s, k=%d)", op, k))
	return commands
}

// waitForPlugins waits until no plugin a killed runner started still runs.
func waitForPlugins(t *testing.T, wrapDir string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		running, err := filepath.Glob(filepath.Join(wrapDir, "running-*"))
		if err != nil {
			t.Fatal(err)
		}
		if len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugins still running a minute after the runner ended: %v", running)
		}
	}
}

// The crash matrix (issue 31): for each of Setup of a workload on two
// networks (the second's first ADD fails once, through failonce, so Setup
// retries), Teardown, Connect (of the second network), Disconnect (of the
// second of two) and GC (of a dead workload's attachments), a runner child
// process is killed with SIGKILL right after its k-th plugin command
// completes. The killwrap test plugin stands in for every plugin of the
// chains (loopback, bridge, firewall, portmap, failonce; not the IPAM
// plugin bridge runs itself): it runs the real one, counts the command and
// kills its parent, the runner, at the k-th, before the runner reads the
// result. Two live neighbours (one per network, each with a mapped port,
// of the same owner) serve HTTP throughout, and a goroutine counts their
// rules while the runner runs and dies: never fewer. After each kill a
// restarted runner — a new Configurator in the test process, with the
// child's Owner — runs the Teardown of the departed allocation, then GC
// with the neighbours live (still counted); then nothing of the departed
// allocation is left (the host against a baseline that holds the
// neighbours, and the registry), and the neighbours still answer on their
// ports.
//
// k = 0 is the uninterrupted run, which counts the commands (the test logs
// them): with the Debian plugins and upstream's iptables backends, Setup
// runs 19 (the first network's four ADDs; the second's five, whose last
// fails; its five DELs and five ADDs again), Teardown and GC 9, Connect and
// Disconnect 5; with the nftables backends portmap's DEL runs once for a
// whole workload and not at all for one network of several, one fewer.
// Teardown and Disconnect run every k on every plugin set. To keep the
// suite within its time on two cores, Setup, Connect and GC run a
// representative subset (crashMatrixKs): the first, middle and last
// command, and for Setup the failed ADD and its retry's first DEL;
// CNINET_CRASH_MATRIX=full runs every k of every operation. Nothing is
// skipped, under CI or not.
//
// One more Disconnect cell, "after-the-DEL-returned", kills the runner
// after its last plugin command with libcni's cached result of the
// departed network removed first (killwrap's KILLWRAP_DROP_CACHE), as
// libcni removes it once the chain's DEL returned: the runner dies after
// the DEL and before its cleanup, with the registry record the only
// proof left. The restarted runner disconnects again first, and then no
// rule may name the departed network's address (with the nftables
// backends, portmap was left out of that DEL: its rules carry only the
// bare container id).
func TestCrashMatrixARunnerKilledAfterAnyPluginCommandLeavesNothingAndNeverCostsANeighbourARule(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		m := newCrashMatrix(t, set)
		for _, op := range crashMatrixOps {
			t.Run(op, func(t *testing.T) {
				start := time.Now()
				var log []string
				t.Run("k=0", func(t *testing.T) { log = m.cell(t, op, 0) })
				n := len(log)
				if n == 0 {
					t.Fatalf("the uninterrupted %s ran no plugin command", op)
				}
				t.Logf("the uninterrupted %s's plugin commands:\n%s", op, strings.Join(log, "\n"))
				ks := crashMatrixKs(op, log)
				for _, k := range ks {
					t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) { m.cell(t, op, k) })
				}
				if op == "Disconnect" {
					t.Run(fmt.Sprintf("k=%d,after-the-DEL-returned", n), func(t *testing.T) { m.cell(t, op, -n) })
				}
				t.Logf("%s: %d plugin commands, killed after each of %v, in %v", op, n, ks, time.Since(start).Round(time.Millisecond))
			})
		}
	})
}

// countedIn wraps count so that each sample it takes is also counted in
// the file at path, which killwrap reads to hold a kill until a sample
// was taken wholly after the runner's k-th plugin command.
func countedIn(path string, count func() (int, error)) func() (int, error) {
	n := 0
	return func() (int, error) {
		v, err := count()
		if err != nil {
			return v, err
		}
		n++
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.Itoa(n)), 0o644); err != nil {
			return v, err
		}
		return v, os.Rename(tmp, path)
	}
}
