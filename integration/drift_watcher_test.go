package integration

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// The repair watcher (Config.RepairEvery) against the real plugins: with
// an interval of ten minutes, only the nf_tables notifications of a
// flush can start its passes within a test.

// watcherWait bounds how long a test waits for the watcher to make the
// workloads whole again after a flush: it takes well under a second, and
// its next periodic pass is ten minutes away.
const watcherWait = 20 * time.Second

// repairLog keeps what a Configurator logs, so that a test can tell what
// its repair watcher did; warnings and errors, and the watcher's repairs,
// also go to the test's log.
type repairLog struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *repairLog) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\n")
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	if !strings.Contains(line, "[INFO]") || strings.Contains(line, "attachment repaired") {
		l.t.Log(line)
	}
	return len(p), nil
}

// mark is where the log is now, for repairedSince.
func (l *repairLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// sortedLines is s's lines sorted: a multiset to compare.
func sortedLines(s string) string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// countSince counts the lines logged since mark that hold s.
func (l *repairLog) countSince(mark int, s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines[mark:] {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// repairedSince reports whether id's attachment was repaired after mark.
func (l *repairLog) repairedSince(mark int, id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.lines[mark:], func(line string) bool {
		return strings.Contains(line, "attachment repaired") && strings.Contains(line, "alloc_id="+id+" ")
	})
}

// newWatchingConfigurator is a Configurator on conf whose repair watcher
// runs every ten minutes (and on every nf_tables change), logging to log.
func newWatchingConfigurator(t *testing.T, set netsandbox.PluginSet, conf []byte, log *repairLog) *cninet.Configurator {
	t.Helper()
	c, err := cninet.New(cninet.Config{
		Logger:      hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.Info, Output: log}),
		ConfList:    conf,
		PluginDirs:  []string{set.Dir},
		RepairEvery: 10 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// awaitRepaired waits until the watcher logged a repair of each of ws
// since mark and each one's rules equal, as a multiset, wholes' entry of
// its id; then each answers on its port. It returns how long it took.
func awaitRepaired(t *testing.T, nw network, log *repairLog, mark int, wholes map[string][]string, ws ...driftWorkload) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		done := true
		for _, w := range ws {
			if !log.repairedSince(mark, w.alloc.ID) || !slices.Equal(w.rules(t, nw), wholes[w.alloc.ID]) {
				done = false
			}
		}
		if done {
			break
		}
		if time.Since(start) > watcherWait {
			for _, w := range ws {
				t.Logf("%s: repaired since the flush: %v; rules:\n  %s\nwant\n  %s", w.alloc.ID, log.repairedSince(mark, w.alloc.ID),
					strings.Join(w.rules(t, nw), "\n  "), strings.Join(wholes[w.alloc.ID], "\n  "))
			}
			t.Fatalf("the repair watcher did not make the workloads whole within %s of the flush", watcherWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	for _, w := range ws {
		w.assertServed(t, nw, "after the watcher's repair")
	}
	return took
}

// flushRuleset is a whole-ruleset flush, as `systemctl restart nftables`
// does: every plugin set loses everything.
func flushRuleset(t *testing.T) { run(t, "nft", "flush", "ruleset") }

// With Config.RepairEvery of ten minutes and two live workloads, each
// mapping a host port: after the nat table is flushed (the iptables
// backends), after a firewall reload (every table flushed, its chains
// deleted) and after nft flush ruleset, the watcher makes both whole by
// itself, without a Check call: their rules equal, as a multiset, what
// the plugins wrote, and their ports answer from the host. A workload
// torn down right after a flush, with a flush right after its Teardown,
// never gets anything back, while the watcher repairs the others (it
// ran): a sampler sees none of its rules, and the host holds nothing of
// it. After Close, a flush stays flushed.
func TestTheRepairWatcherRestoresAFlushByItselfAndNeverATornDownWorkload(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		base := baseline(t)
		log := &repairLog{t: t}
		c := newWatchingConfigurator(t, set, nw.conf, log)
		a := setUpDriftWorkload(t, c, nw, "watch-a", hostPort(nw.cfg.NetworkName, 0))
		b := setUpDriftWorkload(t, c, nw, "watch-b", hostPort(nw.cfg.NetworkName, 1))
		wholes := map[string][]string{a.alloc.ID: a.rules(t, nw), b.alloc.ID: b.rules(t, nw)}
		baseAB := baseline(t)

		// At most three flushes per watcher: a drift that comes back a
		// fourth time within a minute is reported, not repaired.
		for _, d := range driftsNamed(t, "the nat table flushed", "every table flushed and its chains deleted (a firewall reload)", "nft flush ruleset") {
			if !d.applies(set) {
				continue
			}
			t.Run(d.name, func(t *testing.T) {
				mark := log.mark()
				d.do(t, driftScene{nw: nw, id: a.alloc.ID, addrs: a.addrs})
				took := awaitRepaired(t, nw, log, mark, wholes, a, b)
				t.Logf("both workloads whole and answering %s after the flush", took.Round(time.Millisecond))
			})
		}
		c.Close()

		// The workload is torn down right after the first flush, or once
		// the watcher's pass has repaired the first workload: that pass
		// read the registry before the Teardown and found this one
		// drifting too; it comes to it while the Teardown runs.
		for i, when := range []string{"right after the first flush", "while the watcher's pass repairs the others"} {
			t.Run("a workload torn down between two flushes, "+when, func(t *testing.T) {
				log := &repairLog{t: t}
				c := newWatchingConfigurator(t, set, nw.conf, log)
				gone := setUpDriftWorkload(t, c, nw, "watch-gone-"+string(rune('1'+i)), hostPort(nw.cfg.NetworkName, 2+i))
				mark := log.mark()
				flushRuleset(t)
				for flushed := time.Now(); i > 0 && !log.repairedSince(mark, a.alloc.ID); {
					if time.Since(flushed) > watcherWait {
						t.Fatalf("the watcher did not repair %s within %s of the flush", a.alloc.ID, watcherWait)
					}
					time.Sleep(time.Millisecond)
				}
				if err := c.Teardown(ctxFor(t, time.Minute), gone.alloc, gone.w.Path); err != nil {
					t.Fatal(err)
				}
				count := func() (int, error) { return countRulesOf(nw.cfg.NetworkName, gone.alloc.ID, gone.addrs) }
				s := watch(count)
				flushRuleset(t)
				awaitRepaired(t, nw, log, mark, wholes, a, b)
				time.Sleep(2 * time.Second) // and a few seconds more for anything to come back
				s.finish(t, "the torn-down workload's rules", time.Time{}, time.Now())
				for _, x := range s.samples {
					if x.n != 0 {
						t.Fatalf("%d rules of the torn-down %s came back (%d samples)", x.n, gone.alloc.ID, len(s.samples))
					}
				}
				t.Logf("none of the torn-down workload's rules in %d samples", len(s.samples))
				assertNothingOf(t, c, nw, gone)
				assertNoLeaksBeside(t, baseAB, nw.allowance(), a, b)
				gone.w.Delete()
			})
		}

		t.Run("after Close a flush stays flushed", func(t *testing.T) {
			log := &repairLog{t: t}
			c := newWatchingConfigurator(t, set, nw.conf, log)
			mark := log.mark()
			flushRuleset(t)
			awaitRepaired(t, nw, log, mark, wholes, a, b) // this watcher repairs: it is its Close that stops it
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			mark = log.mark()
			flushRuleset(t)
			time.Sleep(3 * time.Second)
			if n := log.mark(); n != mark {
				t.Fatalf("the closed Configurator logged %d line(s) after the flush", n-mark)
			}
			for _, w := range []driftWorkload{a, b} {
				if got := w.rules(t, nw); len(got) != 0 {
					t.Fatalf("%s's rules came back after Close:\n  %s", w.alloc.ID, strings.Join(got, "\n  "))
				}
			}
			plain := newConfigurator(t, set, nw.conf)
			if err := plain.Check(ctxFor(t, time.Minute), a.alloc, a.w.Path); !errors.Is(err, cninet.ErrCheckFailed) {
				t.Fatalf("Check three seconds after a flush that followed Close: %v, want ErrCheckFailed", err)
			}
			a.tearDown(t, plain)
			b.tearDown(t, plain)
		})
		assertNoLeaks(t, base, nw.allowance())
	})
}

// assertNoLeaksBeside is assertNoLeaks against a baseline that held the
// live workloads, whose rules a repair wrote again since: each restored
// nftables rule has a handle of its own, so they are left out (their
// rules are compared as a multiset elsewhere).
func assertNoLeaksBeside(t *testing.T, base netsandbox.Snapshot, allow netsandbox.Allowance, live ...driftWorkload) {
	t.Helper()
	now, err := netsandbox.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var pats []string
	for _, w := range live {
		pats = append(pats, strconv.Quote(w.alloc.ID))
		for _, a := range w.addrs {
			pats = append(pats, " "+a.String()+" ")
		}
	}
	leaks := slices.DeleteFunc(netsandbox.Leaks(base, now, allow), func(l string) bool {
		return strings.HasPrefix(l, "nft ") && slices.ContainsFunc(pats, func(p string) bool { return strings.Contains(l+" ", p) })
	})
	if len(leaks) > 0 {
		t.Fatalf("%d item(s) leaked:\n  %s", len(leaks), strings.Join(leaks, "\n  "))
	}
}

// assertNothingOf fails unless nothing of w is left: no record in the
// host registry, no reservation, no cached result.
func assertNothingOf(t *testing.T, c *cninet.Configurator, nw network, w driftWorkload) {
	t.Helper()
	assertRecordedAs(t, c, "after its Teardown", w.alloc.ID, nw.cfg.NetworkName, "", false)
	for _, addr := range w.addrs {
		if p := filepath.Join(nw.cfg.IPAMDataDir, nw.cfg.NetworkName, addr.String()); fileExists(p) {
			t.Fatalf("%s's reservation %s is back", w.alloc.ID, p)
		}
	}
	if p := filepath.Join(libcniResults, nw.cfg.NetworkName+"-"+w.alloc.ID+"-eth0"); fileExists(p) {
		t.Fatalf("%s's cached result %s is back", w.alloc.ID, p)
	}
}

// savedTables is iptables-save and ip6tables-save of the nat and filter
// tables, without the counters and comments that change by themselves.
func savedTables(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		for _, table := range []string{"nat", "filter"} {
			out, err := exec.Command(hostTool(bin), "-t", table).Output()
			if err != nil {
				t.Fatalf("%s -t %s: %v", bin, table, err)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, "#") {
					continue
				}
				if i := strings.Index(line, " ["); strings.HasPrefix(line, ":") && i > 0 {
					line = line[:i]
				}
				b.WriteString(bin + " " + line + "\n")
			}
		}
	}
	return b.String()
}

// After a firewall reload under three live workloads, the watcher writes
// their rules back in one batch (one iptables-restore per family and
// table), and the tables it leaves equal, line for line and in each
// chain's order, those the plugins wrote at ADD: no rule more (a shared
// one twice), none less, none in another place. On the nftables set the
// batch writes the firewall plugin's iptables rules; portmap's and the
// masquerade's come back through the plugins, in nftables.
func TestAfterAFirewallReloadTheWatchersBatchLeavesTheTablesThePluginsWrote(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		reload := driftsNamed(t, "every table flushed and its chains deleted (a firewall reload)")[0]
		reload.do(t, driftScene{nw: nw}) // what the sets before left in the shared chains: not this set's to write
		base := baseline(t)
		log := &repairLog{t: t}
		c := newWatchingConfigurator(t, set, nw.conf, log)
		var ws []driftWorkload
		wholes := map[string][]string{}
		for i, id := range []string{"batch-a", "batch-b", "batch-c"} {
			w := setUpDriftWorkload(t, c, nw, id, hostPort(nw.cfg.NetworkName, i))
			ws = append(ws, w)
			wholes[id] = w.rules(t, nw)
		}
		written := savedTables(t)
		mark := log.mark()
		reload.do(t, driftScene{nw: nw, id: ws[0].alloc.ID, addrs: ws[0].addrs})
		took := awaitRepaired(t, nw, log, mark, wholes, ws...)
		if after := savedTables(t); after != written {
			t.Fatalf("after the watcher's repair the tables are:\n%s\nthe plugins wrote:\n%s", after, written)
		}
		if batches := log.countSince(mark, "iptables rules restored in one batch"); batches == 0 {
			t.Fatal("the watcher logged no batch: the plugins' ADD repaired every workload")
		}
		t.Logf("whole and answering %s after the reload; the tables equal the plugins'", took.Round(time.Millisecond))

		// One workload's forward rules deleted: the batch writes them
		// back while its neighbours keep every rule at every instant (a
		// batch only adds), and the tables hold what the plugins wrote,
		// as a multiset (the rules come back at the end of CNI-FORWARD,
		// where the plugin appends them too).
		neighbours := func() (int, error) {
			a, err := countRulesOf(nw.cfg.NetworkName, ws[1].alloc.ID, ws[1].addrs)
			b, errB := countRulesOf(nw.cfg.NetworkName, ws[2].alloc.ID, ws[2].addrs)
			return a + b, errors.Join(err, errB)
		}
		want, err := neighbours()
		if err != nil {
			t.Fatal(err)
		}
		sampler := watch(neighbours)
		mark, from := log.mark(), time.Now()
		driftsNamed(t, "its forward rules deleted")[0].do(t, driftScene{nw: nw, id: ws[0].alloc.ID, addrs: ws[0].addrs})
		awaitRepaired(t, nw, log, mark, wholes, ws[0])
		sampler.assertNeverBelow(t, "the neighbours' rules while the batch repaired the other", want, from, time.Now())
		if after := savedTables(t); sortedLines(after) != sortedLines(written) {
			t.Fatalf("after the repair of the forward rules the tables are:\n%s\nthe plugins wrote:\n%s", after, written)
		}
		if log.countSince(mark, "iptables rules restored in one batch") == 0 {
			t.Fatal("the watcher logged no batch for the forward rules")
		}
		// The same sampler sees a neighbour's rules go (the watcher
		// closed, nothing brings them back): it could have seen a drop
		// above.
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		control := watch(neighbours)
		driftsNamed(t, "its forward rules deleted")[0].do(t, driftScene{nw: nw, id: ws[1].alloc.ID, addrs: ws[1].addrs})
		time.Sleep(300 * time.Millisecond)
		if least, _ := control.finish(t, "the neighbours' rules, one of them drifting", from, time.Now()); least >= want {
			t.Fatalf("the sampler never saw fewer than %d rules after a neighbour's forward rules were deleted: it cannot see a drop", want)
		}
		plain := newConfigurator(t, set, nw.conf)
		for _, w := range ws {
			w.tearDown(t, plain)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}
