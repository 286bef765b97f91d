package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// A repair killed anywhere: a runner child runs Check with Repair after a
// whole-ruleset flush and is SIGKILLed after its k-th step — a plugin's
// ADD (killwrap standing in for the plugins) or a rule write of its own
// (killwrap standing in for iptables, ip6tables and nft on its PATH).

// repairCrash is one plugin set's rig: a network whose plugins and rule
// commands killwrap wraps, and a live neighbour.
type repairCrash struct {
	nw         network
	pluginDirs []string
	commands   string // killwrap as iptables, ip6tables, nft and their -restore
	owner      string
	neighbour  driftWorkload
	wholeB     []string
	base       netsandbox.Snapshot
}

// commandWrapDir is a directory holding killwrap as iptables, ip6tables,
// nft, iptables-restore and ip6tables-restore, for the front of a
// runner's PATH.
func commandWrapDir(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(netsandbox.BuildPlugin(t, "killwrap"), "killwrap")
	dir := t.TempDir()
	for _, name := range []string{"iptables", "ip6tables", "nft", "iptables-restore", "ip6tables-restore"} {
		if err := os.Symlink(bin, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func newRepairCrash(t *testing.T, set netsandbox.PluginSet) *repairCrash {
	t.Helper()
	m := &repairCrash{nw: newNetwork(t, set, false), owner: "repair-crash", commands: commandWrapDir(t)}
	m.pluginDirs = []string{killwrapDir(t, []string{set.Dir}), set.Dir}
	c := m.configurator(t)
	m.neighbour = setUpDriftWorkload(t, c, m.nw, "rc-neighbour", hostPort(m.nw.cfg.NetworkName, 0))
	m.wholeB = m.neighbour.rules(t, m.nw)
	t.Cleanup(func() { m.neighbour.tearDown(t, c) })
	m.base = baseline(t)
	return m
}

// configurator is a Configurator of the rig's owner, as the runner's.
func (m *repairCrash) configurator(t *testing.T) *cninet.Configurator {
	t.Helper()
	cfg := matrixConfig(matrixRunner{ConfList: m.nw.conf, PluginDirs: m.pluginDirs, Owner: m.owner})
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.Warn, Output: testWriter{t}})
	c, err := cninet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// neighbourRules counts the neighbour's rules (rulesOf).
func (m *repairCrash) neighbourRules() (int, error) {
	return countRulesOf(m.nw.cfg.NetworkName, m.neighbour.alloc.ID, m.neighbour.addrs)
}

// cell sets a workload up, flushes the ruleset, repairs the neighbour,
// and has a runner child repair the workload by op — "Repair" (Check
// with Repair) or "WatchPass" (the repair watcher's pass at start) —
// killed after its k-th step (k = 0: never); then a restarted runner's repair makes it whole (its
// rules as the plugins wrote them, its port answering), and its Teardown
// and a GC leave nothing. The neighbour's rules, sampled while the runner
// runs and while the restarted one does, never drop. It returns killwrap's log of the
// runner's steps.
func (m *repairCrash) cell(t *testing.T, op string, k int) []string {
	t.Helper()
	c := m.configurator(t)
	a := setUpDriftWorkload(t, c, m.nw, fmt.Sprintf("rc-%d", k), hostPort(m.nw.cfg.NetworkName, 1))
	whole := a.rules(t, m.nw)
	flushRuleset(t)
	if err := c.Check(ctxFor(t, time.Minute), m.neighbour.alloc, m.neighbour.w.Path, cninet.CheckOptions{Repair: true}); err != nil {
		t.Fatalf("Repair of the neighbour: %v", err)
	}
	if got := m.neighbour.rules(t, m.nw); !slices.Equal(got, m.wholeB) {
		t.Fatalf("the neighbour's rules after its repair:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(m.wholeB, "\n  "))
	}
	want := len(m.wholeB)

	wrapDir := t.TempDir()
	spec, err := json.Marshal(matrixRunner{Op: op, ConfList: m.nw.conf, PluginDirs: m.pluginDirs, Owner: m.owner,
		Alloc: *a.alloc, Netns: a.w.Path, RepairEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runner := exec.Command(os.Args[0], "-test.run=^$")
	samples := filepath.Join(wrapDir, "samples")
	runner.Env = append(os.Environ(), crashMatrixRunnerEnv+"="+string(spec), "KILLWRAP_DIR="+wrapDir, "KILLWRAP_KILL_AT="+strconv.Itoa(k),
		"KILLWRAP_AWAIT_SAMPLES="+samples, "PATH="+m.commands+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stderr bytes.Buffer
	runner.Stderr = &stderr
	var runErr error
	sampleWhile(t, "the neighbour's rules while the runner repairs", want, countedIn(samples, m.neighbourRules), func() { runErr = runner.Run() })
	waitForPlugins(t, wrapDir)
	log, _ := os.ReadFile(filepath.Join(wrapDir, "log"))
	steps := strings.Split(strings.TrimSuffix(string(log), "\n"), "\n")
	if len(log) == 0 {
		steps = nil
	}
	var exit *exec.ExitError
	switch {
	case k == 0 && runErr != nil:
		t.Fatalf("the uninterrupted repair failed: %v; stderr:\n%s", runErr, stderr.String())
	case k > 0 && (!errors.As(runErr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL):
		t.Fatalf("the runner ended with %v, want killed by SIGKILL after step %d; steps:\n%s\nstderr:\n%s", runErr, k, log, stderr.String())
	case k > 0:
		t.Logf("killed after step %d of the repair: %s", k, steps[k-1])
	}
	m.neighbour.assertServed(t, m.nw, fmt.Sprintf("after the runner's repair (k=%d)", k))

	c = m.configurator(t) // the restarted runner
	sampleWhile(t, "the neighbour's rules during the restarted runner's repair, Teardown and GC", want, m.neighbourRules, func() {
		if err := c.Check(ctxFor(t, time.Minute), a.alloc, a.w.Path, cninet.CheckOptions{Repair: true}); err != nil {
			t.Fatalf("the restarted runner's repair: %v", err)
		}
		if got := a.rules(t, m.nw); !slices.Equal(got, whole) {
			t.Fatalf("after the restarted runner's repair the workload's rules are\n  %s\nwant, as the plugins wrote them,\n  %s",
				strings.Join(got, "\n  "), strings.Join(whole, "\n  "))
		}
		a.assertServed(t, m.nw, "after the restarted runner's repair")
		if err := c.Teardown(ctxFor(t, time.Minute), a.alloc, a.w.Path); err != nil {
			t.Fatalf("the restarted runner's Teardown: %v", err)
		}
		if _, err := c.GC(ctxFor(t, time.Minute), []string{m.neighbour.alloc.ID}); err != nil {
			t.Fatalf("the restarted runner's GC: %v", err)
		}
	})
	a.w.Delete()
	assertRecordedAs(t, c, "after the restarted runner's Teardown", a.alloc.ID, m.nw.cfg.NetworkName, "", false)
	assertNoLeaksBeside(t, m.base, m.nw.allowance(), m.neighbour)
	m.neighbour.assertServed(t, m.nw, fmt.Sprintf("after the restarted runner (k=%d)", k))
	return steps
}

// A repair killed after any of its steps (the crash matrix of issue 38):
// on each plugin set, a workload and a live neighbour, each mapping a
// host port; nft flush ruleset takes everything of both (the drift with
// the most to write back on every set: the masquerade rules cninet
// writes itself through iptables, or its nft script, and the firewall's
// and portmap's ADDs); the neighbour is repaired in the test process;
// then a runner child repairs the workload and is SIGKILLed right after
// its k-th step completes, a plugin's ADD or a rule write of its own
// (killwrap wraps both, and counts them in one sequence), for every k the
// uninterrupted repair (k = 0) takes. After each kill a restarted runner's
// repair makes the workload whole — its rules, as a multiset, what the
// plugins wrote at Setup: the killed repair left nothing twice — and its
// port answers; its Teardown and a GC leave nothing, and the neighbour's
// rules, sampled throughout, never drop.
func TestARepairKilledAfterAnyStepIsFinishedByTheNextAndNeverCostsTheNeighbourARule(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		killAfterEachStep(t, newRepairCrash(t, set), "Repair", func(steps []string) string {
			if len(steps) == 0 {
				return "the uninterrupted repair took no step killwrap counts"
			}
			return ""
		})
	})
}

// killAfterEachStep runs op uninterrupted, asks wrong what is wrong with
// its steps ("" for nothing), then kills it after each of them.
func killAfterEachStep(t *testing.T, m *repairCrash, op string, wrong func(steps []string) string) {
	start := time.Now()
	var steps []string
	t.Run("k=0", func(t *testing.T) { steps = m.cell(t, op, 0) })
	if why := wrong(steps); why != "" {
		t.Fatalf("%s; its steps:\n%s", why, strings.Join(steps, "\n"))
	}
	t.Logf("the uninterrupted %s's steps:\n%s", op, strings.Join(steps, "\n"))
	for k := 1; k <= len(steps); k++ {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) { m.cell(t, op, k) })
	}
	t.Logf("%d steps, killed after each, in %s", len(steps), time.Since(start).Round(time.Millisecond))
}

// The repair watcher's pass killed after any of its steps: as above, but
// the runner child repairs the workload by its repair watcher's pass at
// start, whose batch writes the iptables rules of every drifting
// attachment through iptables-restore and ip6tables-restore (one
// transaction per family and table; killwrap counts each), and whose
// plugins' ADDs write the rest. A kill between two of the batch's
// transactions leaves some tables written and others not: the restarted
// runner's repair finishes it with nothing twice, and the neighbour,
// whole throughout, never loses a rule.
func TestAWatcherPassKilledAfterAnyStepIsFinishedByTheNextAndNeverCostsTheNeighbourARule(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		killAfterEachStep(t, newRepairCrash(t, set), "WatchPass", func(steps []string) string {
			if !slices.ContainsFunc(steps, func(s string) bool { return strings.Contains(s, "-restore restore") }) {
				return "the uninterrupted pass wrote no batch through iptables-restore"
			}
			return ""
		})
	})
}
