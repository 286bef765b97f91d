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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sasha-s/go-deadlock"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/killpoint"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/sandbox"
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
	Op         string // Setup, Teardown, Connect, Disconnect, GC, Repair (Check with CheckOptions.Repair) or WatchPass (the repair watcher's pass at start)
	ConfList   []byte
	ConfLists  [][]byte
	PluginDirs []string
	Owner      string
	Alloc      cninet.Allocation
	Netns      string
	Network    string   // Connect, Disconnect
	Live       []string // GC
	// RepairEvery is the runner's Config.RepairEvery for WatchPass.
	RepairEvery time.Duration

	repairs *runnerRepairLog // WatchPass: the runner's log
}

func matrixConfig(r matrixRunner) cninet.Config {
	cfg := cninet.Config{ConfList: r.ConfList, ConfLists: r.ConfLists, PluginDirs: r.PluginDirs, Owner: r.Owner,
		Retry: cninet.RetryPolicy{Attempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond}}
	if r.Op == "WatchPass" {
		cfg.RepairEvery = r.RepairEvery
	}
	return cfg
}

// crashMatrixPointEnv, set in a runner's environment as "<point>:<n>",
// kills the runner when it reaches the n-th killpoint of that name,
// after a sample was taken (as killwrap does after a plugin command).
const crashMatrixPointEnv = "CNINET_CRASH_MATRIX_KILL_POINT"

// runMatrixRunner is the child's whole life; it returns its exit code.
func runMatrixRunner(spec string) int {
	var r matrixRunner
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		fmt.Fprintln(os.Stderr, "matrix runner:", err)
		return 2
	}
	// The plugins the runner's plugins run (the IPAM plugin the bridge
	// plugin runs) kill this process, not their parent.
	os.Setenv("KILLWRAP_RUNNER", strconv.Itoa(os.Getpid()))
	if at := os.Getenv(crashMatrixPointEnv); at != "" {
		armKillPoint(at, os.Getenv("KILLWRAP_AWAIT_SAMPLES"))
	}
	cfg := matrixConfig(r)
	if r.Op == "WatchPass" {
		r.repairs = newRunnerRepairLog(r.Alloc.ID)
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.Info, JSONFormat: true, Output: r.repairs})
	}
	c, err := cninet.New(cfg)
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
	case "WatchPass":
		return awaitRunnerRepair(ctx, c, r.repairs)
	}
	return fmt.Errorf("unknown operation %q", r.Op)
}

// runnerRepairLog is the runner's log, JSON lines, watched for the line of
// the repair watcher's repair of one id.
type runnerRepairLog struct {
	id   string
	mu   sync.Mutex
	buf  []byte
	line chan string // the first such line; buffered
}

func newRunnerRepairLog(id string) *runnerRepairLog {
	return &runnerRepairLog{id: id, line: make(chan string, 1)}
}

func (l *runnerRepairLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.buf[:i])
		l.buf = l.buf[i+1:]
		if strings.Contains(line, `"alloc_id":"`+l.id+`"`) && strings.Contains(line, "attachment") {
			select {
			case l.line <- line:
			default:
			}
		}
	}
}

// awaitRunnerRepair waits for the line of the repair watcher's repair of
// id: once logged, the pass has done every step of it (the plugins it
// ran have exited), and Close waits for the rest of the pass.
func awaitRunnerRepair(ctx context.Context, c *cninet.Configurator, log *runnerRepairLog) error {
	select {
	case line := <-log.line:
		if !strings.Contains(line, `"attachment repaired"`) {
			return fmt.Errorf("the repair watcher did not make %s whole: %s", log.id, line)
		}
		return c.Close()
	case <-ctx.Done():
		return fmt.Errorf("the repair watcher logged no repair of %s: %w", log.id, ctx.Err())
	}
}

// crashMatrixOps are the operations of the matrix, in order.
var crashMatrixOps = []string{"Setup", "Teardown", "Connect", "Disconnect", "GC"}

// armKillPoint kills this process with SIGKILL at the n-th killpoint of
// the name spec ("<point>:<n>") gives, once the test's sampler, counting
// in the file samples, has taken a sample wholly after it.
func armKillPoint(spec, samples string) {
	point, nth, _ := strings.Cut(spec, ":")
	want, _ := strconv.Atoi(nth)
	var reached atomic.Int32
	killpoint.SetHook(func(p string) {
		if p != point || int(reached.Add(1)) != want {
			return
		}
		if samples != "" {
			awaitSamples(samples)
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the kill is on its way
	})
}

// awaitSamples holds a kill until the test's sampler, which counts its
// samples in the file at path, has taken one wholly after this point (as
// killwrap's awaitSamples); bounded, so that a sampler that stopped
// cannot hang the runner.
func awaitSamples(path string) {
	count := func() int {
		b, _ := os.ReadFile(path)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	c0 := count()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && count() < c0+3; {
		time.Sleep(5 * time.Millisecond)
	}
}

// crashMatrixPoints are the killpoints op is killed at too (the first
// time each is reached): after a record was written (before a Setup's
// or a Connect's first ADD; before a detach's DEL, the proof recorded),
// and inside a cleanup, after its rules went and after its files went
// (a Setup's between its attempts; a Connect, whose one ADD succeeds,
// runs none).
func crashMatrixPoints(op string) []string {
	if op == "Connect" {
		return []string{killpoint.Recorded}
	}
	return []string{killpoint.Recorded, killpoint.RulesRemoved, killpoint.FilesRemoved}
}

// killAt is where a cell's runner dies.
type killAt struct {
	command int    // right after its command-th plugin command (0: not there)
	point   string // at the first killpoint of that name ("": not there)
	// returned: a Disconnect killed after its last plugin command, with
	// libcni's cached result of the departed network dropped first, as
	// libcni drops it once the chain's DEL returned.
	returned bool
}

func (k killAt) String() string {
	switch {
	case k.point != "":
		return "at " + k.point
	case k.returned:
		return fmt.Sprintf("k=%d,after-the-DEL-returned", k.command)
	}
	return fmt.Sprintf("k=%d", k.command)
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
	nbNetns    []string
	base       netsandbox.Snapshot
}

// killwrapDir is a directory of plugins that are killwrap under the names
// of the chains' plugins, finding the real ones in realDirs.
func killwrapDir(t *testing.T, realDirs []string) string {
	t.Helper()
	bin := filepath.Join(netsandbox.BuildPlugin(t, "killwrap"), "killwrap")
	dir := t.TempDir()
	for _, name := range []string{"loopback", "bridge", "host-local", "firewall", "portmap", "failonce"} {
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
		m.nbNetns = append(m.nbNetns, w.Path)
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
func (m *crashMatrix) departed(t *testing.T, op string, at killAt) (*cninet.Allocation, *netsandbox.Workload, string) {
	t.Helper()
	id := fmt.Sprintf("cm-%s-%d", strings.ToLower(op), at.command)
	switch {
	case at.returned:
		id = fmt.Sprintf("cm-%s-returned", strings.ToLower(op))
	case at.point != "":
		id = fmt.Sprintf("cm-%s-%s", strings.ToLower(op), strings.ReplaceAll(at.point, " ", "-"))
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
	if len(st.Interfaces) == 2 {
		second = st.Interfaces[1].Address.String()
	}
	if op == "GC" {
		if err := w.Delete(); err != nil {
			t.Fatal(err)
		}
	}
	return alloc, w, second
}

// cell runs op in a runner killed where at says (never for the zero
// killAt), then a restarted runner's Teardown of the departed
// allocation — after which nothing of it may be left, before any GC —
// then its GC, and checks that nothing of the departed allocation is
// left and the neighbours never lost a rule. For a Disconnect killed
// after its DEL returned, the restarted runner first disconnects again
// and finds no rule naming the departed network's address left. It
// returns the log of the plugin commands the runner ran.
func (m *crashMatrix) cell(t *testing.T, op string, at killAt) []string {
	t.Helper()
	alloc, w, second := m.departed(t, op, at)
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
	runner.Env = append(os.Environ(), crashMatrixRunnerEnv+"="+string(spec), "KILLWRAP_DIR="+wrapDir, "KILLWRAP_AWAIT_SAMPLES="+samples)
	if at.point != "" {
		runner.Env = append(runner.Env, crashMatrixPointEnv+"="+at.point+":1")
	} else {
		runner.Env = append(runner.Env, "KILLWRAP_KILL_AT="+strconv.Itoa(at.command))
	}
	if at.returned {
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
	killed := at != killAt{}
	switch {
	case !killed && runErr != nil:
		t.Fatalf("the uninterrupted %s failed: %v; stderr:\n%s", op, runErr, stderr.String())
	case killed && (!errors.As(runErr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL):
		t.Fatalf("the runner ended with %v, want killed by SIGKILL %s; plugin commands:\n%s\nstderr:\n%s", runErr, at, log, stderr.String())
	case at.point != "":
		t.Logf("killed %s of %s, after %d plugin command(s)", at, op, len(commands))
	case killed:
		t.Logf("killed after command %d of %s: %s", at.command, op, commands[at.command-1])
	}
	m.assertNeighboursServed(t, fmt.Sprintf("after the runner's %s (%s)", op, at))

	c := m.configurator(t)
	if at.returned {
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
	// One sampler for both: a GC with nothing left to collect can end
	// within a sample.
	sampleWhile(t, "the neighbours' rules during the restarted runner's Teardown and GC", want, m.neighbourLines, func() {
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatalf("the restarted runner's Teardown: %v", err)
		}
		m.assertDeparted(t, c, alloc, fmt.Sprintf("after the restarted runner's Teardown alone (%s, %s)", op, at))
		if _, err := c.GC(ctxFor(t, time.Minute), []string{m.neighbours[0].ID, m.neighbours[1].ID}); err != nil {
			t.Fatalf("the restarted runner's GC: %v", err)
		}
	})
	if err := w.Delete(); err != nil {
		t.Fatal(err)
	}
	m.assertDeparted(t, c, alloc, fmt.Sprintf("after the restarted runner's GC (%s, %s)", op, at))
	m.assertNeighboursServed(t, fmt.Sprintf("after the restarted runner (%s, %s)", op, at))
	return commands
}

// assertDeparted fails when the registry still records alloc, or the
// host holds anything beyond the matrix's baseline.
func (m *crashMatrix) assertDeparted(t *testing.T, c *cninet.Configurator, alloc *cninet.Allocation, when string) {
	t.Helper()
	atts, err := c.Attachments()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts {
		if a.ID == alloc.ID {
			t.Errorf("%s: the registry still records %s in %s (%s)", when, a.ID, a.Network, a.State)
		}
	}
	now, err := netsandbox.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if leaks := netsandbox.Leaks(m.base, now, allowBoth(m.n1, m.n2)); len(leaks) > 0 {
		t.Fatalf("%s: %d item(s) left:\n  %s", when, len(leaks), strings.Join(leaks, "\n  "))
	}
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

// The crash matrix (issues 31 and 39): for each of Setup of a workload
// on two networks (the second's first ADD fails once, through failonce,
// so Setup retries), Teardown, Connect (of the second network),
// Disconnect (of the second of two) and GC (of a dead workload's
// attachments), a runner child process is killed with SIGKILL right after
// its k-th plugin command completes, for every k. The killwrap test
// plugin stands in for every plugin of the chains (loopback, bridge, the
// host-local IPAM plugin the bridge plugin runs, firewall, portmap,
// failonce): it runs the real one, counts the command and kills the
// runner at the k-th, before the runner reads the result. Each operation
// is also killed at the first of each of cninet's own killpoints: right
// after a record of the host registry was written (for Setup, before
// its first ADD; for a detach, its proof recorded before the DEL), and
// inside a cleanup, after its rules went and after its files went. Two
// live neighbours (one per network, each with a mapped port, of the same
// owner) serve HTTP throughout, and a goroutine counts their rules while
// the runner runs and dies: never fewer. After each kill a restarted
// runner — a new Configurator in the test process, with the child's
// Owner — runs the Teardown of the departed allocation, and then, before
// any GC, nothing of it may be left (the host against a baseline that
// holds the neighbours, and the registry); then its GC with the
// neighbours live (still counted) may leave nothing either, and the
// neighbours still answer on their ports.
//
// k = 0 is the uninterrupted run, which counts the commands (the test
// logs them). Nothing is skipped, under CI or not.
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
//
// Last, the sampler's positive control: a neighbour's DEL run without
// cninet (through libcni, unprevented) drops the count it watches.
//
// Each plugin set's matrix runs in a child process of its own, in
// network and mount namespaces of its own (as the suite's sandbox), so
// that the three run at once: their hosts are apart, their baselines
// their own.
func TestCrashMatrixARunnerKilledAfterAnyPluginCommandLeavesNothingAndNeverCostsANeighbourARule(t *testing.T) {
	netsandbox.Require(t)
	if only := os.Getenv(crashMatrixSetEnv); only != "" { // a plugin set's child
		for _, set := range netsandbox.PluginSets(t) {
			if set.Name == only {
				t.Run(set.Name, func(t *testing.T) { crashMatrixOf(t, set) })
				return
			}
		}
		t.Fatalf("no plugin set %q", only)
	}
	for _, set := range netsandbox.PluginSets(t) {
		t.Run(set.Name, func(t *testing.T) {
			t.Parallel()
			crashMatrixChild(t, set)
		})
	}
}

// crashMatrixSetEnv, in a child's environment, names the plugin set whose
// crash matrix it runs, in namespaces of its own.
const crashMatrixSetEnv = "CNINET_CRASH_MATRIX_SET"

// crashMatrixChild runs set's crash matrix in a child: this test binary
// again, in new network and mount namespaces, which it prepares as the
// suite's sandbox does (internal/sandbox). Its output is logged: whole
// when it fails, its per-operation lines when it passes.
func crashMatrixChild(t *testing.T, set netsandbox.PluginSet) {
	top, _, _ := strings.Cut(t.Name(), "/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+top+"$", "-test.v", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), crashMatrixSetEnv+"="+set.Name, sandbox.Marker+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		t.Fatalf("the crash matrix of %s in its own namespaces: %v, after %v:\n%s", set.Name, err, time.Since(start).Round(time.Second), out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "plugin commands, killed") || strings.Contains(line, "unprevented DEL dropped") {
			t.Log(strings.TrimSpace(line))
		}
	}
	t.Logf("the crash matrix of %s took %v", set.Name, time.Since(start).Round(time.Second))
}

// crashMatrixOf runs set's crash matrix here.
func crashMatrixOf(t *testing.T, set netsandbox.PluginSet) {
	m := newCrashMatrix(t, set)
	for _, op := range crashMatrixOps {
		t.Run(op, func(t *testing.T) {
			start := time.Now()
			var log []string
			t.Run("k=0", func(t *testing.T) { log = m.cell(t, op, killAt{}) })
			n := len(log)
			if n == 0 {
				t.Fatalf("the uninterrupted %s ran no plugin command", op)
			}
			t.Logf("the uninterrupted %s's plugin commands:\n%s", op, strings.Join(log, "\n"))
			for k := 1; k <= n; k++ {
				t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) { m.cell(t, op, killAt{command: k}) })
			}
			for _, point := range crashMatrixPoints(op) {
				t.Run("at "+point, func(t *testing.T) { m.cell(t, op, killAt{point: point}) })
			}
			if op == "Disconnect" {
				at := killAt{command: n, returned: true}
				t.Run(at.String(), func(t *testing.T) { m.cell(t, op, at) })
			}
			t.Logf("%s: %d plugin commands, killed after each and at %v, in %v", op, n, crashMatrixPoints(op), time.Since(start).Round(time.Millisecond))
		})
	}
	t.Run("the sampler's positive control", func(t *testing.T) {
		before, err := m.neighbourLines()
		if err != nil || before == 0 {
			t.Fatalf("the neighbours' rules: %d, %v; want some", before, err)
		}
		nb := m.neighbours[0]
		sampleDropWhile(t, "the neighbours' rules during an unprevented DEL of one", before, m.neighbourLines, func() {
			if err := unpreventedDEL(t, set, m.n1.conf, nb.ID, m.nbNetns[0], "eth0", nb.Ports); err != nil {
				t.Errorf("the unprevented DEL: %v", err)
			}
		})
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
