package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	gocni "github.com/containerd/go-cni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
)

// drift: live attachments kept whole by the repair watcher
// (Config.RepairEvery), on each plugin set, in the bench's namespace. On
// a network of its own (a /21, one bridge), -drift-n workloads are set
// up, each serving TCP on 8080 behind a mapped host port, then:
//
//  1. flushes: a watcher with a RepairEvery far beyond the run (the
//     nf_tables notifications drive it); -drift-flushes whole-table
//     flushes of each kind (iptables -F and -X of nat and filter, both
//     families; nft flush ruleset), each timed from the end of the
//     flush until the first mapped port answers again, until all
//     answer, and until the watcher has logged every attachment
//     repaired. Flushes are -drift-gap apart, and 5 s after the last
//     recovery at least: the watcher refuses to repair an attachment a
//     fourth time within a minute (a drift that keeps coming back), so
//     faster flushes measure that refusal.
//  2. Setup+Teardown with RepairEvery 30s (the daemon's default) beside
//     go-cni, as the overhead scenario measures it, with the -drift-n
//     attachments live and watched.
//  3. a storm: -drift-storm flushes in 10 s with RepairEvery 30s; the CPU
//     until every port answers again, and Drifts at the end.
//  4. more workloads, up to -drift-check-n: Drifts of all of them, timed,
//     and the iptables and nft processes one Drifts starts, counted.
//  5. idle: the process's CPU over -drift-idle with nothing changing,
//     without a watcher, and with RepairEvery 30s and 10 minutes.
//
// Everything is torn down at the end.

const (
	driftOwner     = "bench-drift"
	driftDaemonGap = 30 * time.Second // cninet daemon's --repair-every default
	driftLong      = 10 * time.Minute
	driftNotify    = 24 * time.Hour // a RepairEvery no run reaches: notifications alone drive the watcher
	driftLimit     = time.Minute    // a recovery not done by then is counted as not recovered
	driftStartWait = 15 * time.Second
	driftQuiet     = 5 * time.Second // after a recovery, before the next flush
	driftWorkers   = 8               // Setups and Teardowns at once
	driftPort0     = 30000
	driftFirst     = time.Second      // target: the first port answers again
	driftAll       = 10 * time.Second // target: all -drift-n answer again
	driftCheck     = time.Second      // target: Drifts of -drift-check-n
	driftIdleShare = 0.005            // target: the watcher's idle CPU, of one core
)

// driftKinds are the whole-table flushes, each a firewall reload's.
var driftKinds = []struct {
	name string
	cmds [][]string
}{
	{"iptables -F, -X (nat, filter; both families)", iptablesFlushCmds()},
	{"nft flush ruleset", [][]string{{"nft", "flush", "ruleset"}}},
}

func iptablesFlushCmds() [][]string {
	var cmds [][]string
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"nat", "filter"} {
			cmds = append(cmds, []string{bin, "-t", table, "-F"}, []string{bin, "-t", table, "-X"})
		}
	}
	return cmds
}

// stormKinds alternate in a storm; iptables-restore with empty tables
// flushes them and deletes their chains in one process per family.
var stormKinds = []func() error{
	func() error { return runWithInput(nil, "nft", "flush", "ruleset") },
	func() error {
		for _, bin := range []string{"iptables-restore", "ip6tables-restore"} {
			if err := runWithInput([]byte("*nat\nCOMMIT\n*filter\nCOMMIT\n"), bin); err != nil {
				return err
			}
		}
		return nil
	},
}

// driftResult is the scenario on one plugin set.
type driftResult struct {
	Set      pluginSet
	N        int           // live attachments during the flushes and the overhead
	Gap      time.Duration // between flushes
	Flushes  []flushSeries // per kind
	Overhead overheadResult
	// OverheadRepairs is the repairs the watcher logged while the overhead
	// was measured (none is expected: nothing drifted).
	OverheadRepairs int
	CheckN          int
	Check           sample    // Drifts of CheckN attachments, each call
	CheckWhole      int       // attachments the last Drifts found whole
	CheckProcs      procCount // the processes one Drifts started
	Idle            []idleCost
	Storm           *stormResult
	Failures        []string // repairs that failed or were refused, first few
	Measured        time.Time
	Took            time.Duration
	Machine         string
}

// flushSeries is one kind of flush, repeated.
type flushSeries struct {
	Kind string
	// First, All: from the end of each flush until the first mapped port
	// answers again, and all of them (flushes where every port answered).
	// Whole: until the watcher had logged every attachment repaired.
	First, All, Whole sample
	// Stopped is, per flush, the ports that did not answer at the first
	// probe after it (the flush cut them off).
	Stopped []int
	// Unrecovered is the flushes after which not every port answered, or
	// not every attachment was repaired, within driftLimit.
	Unrecovered int
	// Repairs is the repairs logged per flush (one per attachment is
	// expected); Refused the watcher's refusals during the series.
	Repairs []int
	Refused int
	CPU     []cpuUse // the process and its children, from each flush until recovered
	Load    [3]float64
}

// idleCost is the process's CPU while nothing changes.
type idleCost struct {
	Every  time.Duration // RepairEvery; 0: no watcher (the baseline)
	Window time.Duration
	CPU    cpuUse // over Window
	// Start is the CPU of New and the watcher's pass at start, over the
	// driftStartWait before the window.
	Start cpuUse
	Load  [3]float64
}

func (i idleCost) share() float64 { return float64(i.CPU.Self+i.CPU.Children) / float64(i.Window) }

// stormResult is a storm of flushes and what it took to recover.
type stormResult struct {
	N, Flushes int
	Took       time.Duration // the storm itself
	Recovered  time.Duration // from the last flush until every port answered (0: not within the limit)
	Span       time.Duration // from the first flush until every port answered, or the limit
	Answering  int           // ports answering at the end
	Whole      int           // attachments Drifts found whole at the end
	CPU        cpuUse        // from the first flush until recovered
	Repairs    int           // repairs logged
	Refused    int
	Load       [3]float64
}

// driftScenario runs every plugin set.
func driftScenario(r *report) error {
	sets := append([]pluginSet{r.opts.debianSet()}, r.opts.upstreamSets()...)
	for k, set := range sets {
		if !strings.Contains(set.Name, r.opts.driftSets) {
			continue
		}
		res, err := driftRun(r.opts, set, k)
		if err != nil {
			return fmt.Errorf("%s: %w", set.Name, err)
		}
		r.res.Drift = slices.DeleteFunc(r.res.Drift, func(d driftResult) bool { return d.Set == set })
		r.res.Drift = append(r.res.Drift, res)
		if err := r.res.save(r.opts.state); err != nil {
			return err
		}
	}
	slices.SortStableFunc(r.res.Drift, func(a, b driftResult) int { return setOrder(a.Set) - setOrder(b.Set) })
	return nil
}

// setOrder is a plugin set's place in the report: Debian's, upstream's
// with iptables, with nftables.
func setOrder(s pluginSet) int {
	switch {
	case strings.HasPrefix(s.Name, "Debian"):
		return 0
	case s.Backend == cninet.BackendNFTables:
		return 2
	}
	return 1
}

// driftRun measures one plugin set: -drift-n workloads, their flushes,
// Setup+Teardown beside go-cni and the storm; then -drift-check-n
// workloads, Drifts and the idle watcher. Every workload is torn down at
// the end.
func driftRun(o options, set pluginSet, k int) (res driftResult, err error) {
	res = driftResult{Set: set, N: o.driftN, Gap: o.driftGap, CheckN: max(o.driftCheckN, o.driftN), Measured: time.Now(), Machine: machine()}
	start := time.Now()
	cfg, conf, err := driftConf(set, k)
	if err != nil {
		return res, err
	}
	subnet := netip.MustParsePrefix(cfg.IPv4Subnet)
	d := &driftNet{set: set, conf: conf, gw: subnet.Addr().Next()}
	if d.plain, err = driftConfigurator(conf, set.Dir, 0, io.Discard, hclog.Error); err != nil {
		return res, err
	}
	defer d.plain.Close()
	defer func() {
		if terr := d.teardown(); err == nil {
			err = terr
		}
	}()
	log := &driftLog{}
	fmt.Fprintf(os.Stderr, "bench:   %s: setting up %d workloads...\n", set.Name, res.N)
	if err := d.grow(res.N); err != nil {
		return res, err
	}
	if err := d.flushes(&res, log, o.driftFlushes); err != nil {
		return res, err
	}
	if err := d.overhead(o, &res, log); err != nil {
		return res, err
	}
	if res.Storm, err = d.storm(o.driftStorm, log); err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "bench:   %s: setting up %d more workloads...\n", set.Name, res.CheckN-res.N)
	if err := d.grow(res.CheckN); err != nil {
		return res, err
	}
	if err := d.check(&res); err != nil {
		return res, err
	}
	for _, every := range []time.Duration{0, driftDaemonGap, driftLong} {
		cost, err := d.idle(every, o.driftIdle)
		if err != nil {
			return res, err
		}
		res.Idle = append(res.Idle, cost)
		fmt.Fprintf(os.Stderr, "bench:   %s: idle, RepairEvery %s: %s over %s (%.3f%% of a core); start %s\n", set.Name, every,
			short(cost.CPU.Self+cost.CPU.Children), cost.Window, 100*cost.share(), short(cost.Start.Self+cost.Start.Children))
	}
	res.Failures = log.failures()
	res.Took = time.Since(start)
	return res, nil
}

// flushes runs every kind of flush -drift-flushes times, with a watcher
// that notifications alone drive.
func (d *driftNet) flushes(res *driftResult, log *driftLog, count int) error {
	c, err := driftConfigurator(d.conf, d.set.Dir, driftNotify, log, hclog.Info)
	if err != nil {
		return err
	}
	defer c.Close()
	time.Sleep(driftStartWait / 3) // its pass at start
	ports := d.ports(res.N)
	var last time.Time
	for _, kind := range driftKinds {
		fs := flushSeries{Kind: kind.name}
		refused := log.refusals()
		var recovered time.Time
		for i := range count {
			if wait := max(res.Gap-time.Since(last), driftQuiet-time.Since(recovered)); wait > 0 {
				time.Sleep(wait)
			}
			for _, cmd := range kind.cmds {
				if err := runWithInput(nil, cmd[0], cmd[1:]...); err != nil {
					return err
				}
			}
			t0 := time.Now()
			last = t0
			mark := markCPU()
			at, stopped := probe(ports, t0, driftLimit)
			whole, repairs := log.allRepaired(t0, len(ports), driftLimit)
			fs.CPU, recovered = append(fs.CPU, mark.since()), time.Now()
			fs.Stopped, fs.Repairs = append(fs.Stopped, stopped), append(fs.Repairs, repairs)
			first, all, ok := repairSpan(at)
			if ok && whole > 0 {
				fs.First, fs.All, fs.Whole = append(fs.First, first), append(fs.All, all), append(fs.Whole, whole)
			} else {
				fs.Unrecovered++
			}
			fmt.Fprintf(os.Stderr, "bench:   %s: %s #%d: %d cut off; first answers %s, all %s, all repaired %s (%d repairs)\n",
				d.set.Name, kind.name, i, stopped, ms(first), ms(all), ms(whole), repairs)
		}
		fs.Refused = log.refusals() - refused
		fs.Load = loadAverage()
		res.Flushes = append(res.Flushes, fs)
	}
	return nil
}

// overhead measures Setup+Teardown beside go-cni with RepairEvery on (the
// daemon's 30s), the live workloads watched meanwhile.
func (d *driftNet) overhead(o options, res *driftResult, log *driftLog) error {
	b := &bench{set: d.set, conf: d.conf, log: &cleanupLog{}, port: 28000}
	var err error
	if b.c, err = driftConfigurator(d.conf, d.set.Dir, driftDaemonGap, io.MultiWriter(b.log, log), hclog.Debug); err != nil {
		return err
	}
	defer b.c.Close()
	if b.raw, err = gocni.New(gocni.WithPluginDir([]string{d.set.Dir}), gocni.WithConfListBytes(d.conf)); err != nil {
		return err
	}
	if o.control {
		if b.control, err = gocni.New(gocni.WithPluginDir([]string{d.set.Dir}), gocni.WithConfListBytes(d.conf)); err != nil {
			return err
		}
	}
	time.Sleep(driftStartWait / 3)
	before := log.repairCount()
	if res.Overhead, err = b.measure(o.overheadN, o.noiseCap*o.overheadN, fmt.Sprintf("drift-ovh-%d", setOrder(d.set))); err != nil {
		return err
	}
	res.OverheadRepairs = log.repairCount() - before
	fmt.Fprintf(os.Stderr, "bench:   %s: Setup+Teardown with RepairEvery %s: cninet %s, go-cni %s, ratio %.3f (control %s)\n", d.set.Name, driftDaemonGap,
		ms(res.Overhead.Lib.median()), ms(res.Overhead.Direct.median()), ratio(res.Overhead.Lib.median(), res.Overhead.Direct.median()), controlRatio(res.Overhead))
	return nil
}

// check times Drifts of every live attachment, then counts the processes
// one Drifts starts, through a Configurator opened under the counting
// shim.
func (d *driftNet) check(res *driftResult) error {
	c, err := driftConfigurator(d.conf, d.set.Dir, 0, io.Discard, hclog.Error)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := ctxMinute()
	defer cancel()
	for range 5 {
		start := time.Now()
		drifts, err := c.Drifts(ctx)
		res.Check = append(res.Check, time.Since(start))
		if err != nil {
			return fmt.Errorf("Drifts: %w", err)
		}
		res.CheckWhole = wholeOf(drifts)
	}
	sh, err := installShim()
	if err != nil {
		return err
	}
	defer sh.remove()
	counted, err := driftConfigurator(d.conf, d.set.Dir, 0, io.Discard, hclog.Error)
	if err != nil {
		return err
	}
	defer counted.Close()
	if _, err := counted.Drifts(ctx); err != nil { // opens the handles
		return err
	}
	sh.reset()
	if _, err := counted.Drifts(ctx); err != nil {
		return err
	}
	res.CheckProcs = sh.count()
	fmt.Fprintf(os.Stderr, "bench:   %s: Drifts of %d: %s median, %d whole; processes %s\n", d.set.Name, len(d.live), ms(res.Check.median()),
		res.CheckWhole, res.CheckProcs)
	return nil
}

// wholeOf counts the drifts that miss nothing and read everything.
func wholeOf(drifts []cninet.Drift) int {
	n := 0
	for _, dr := range drifts {
		if strings.HasPrefix(dr.ID, "drift-") && len(dr.Missing) == 0 && dr.Incomplete == "" {
			n++
		}
	}
	return n
}

// idle measures the process's CPU over window with nothing changing: a
// Configurator with RepairEvery every (0: none), after its start.
func (d *driftNet) idle(every, window time.Duration) (idleCost, error) {
	cost := idleCost{Every: every, Window: window}
	mark := markCPU()
	c, err := driftConfigurator(d.conf, d.set.Dir, every, io.Discard, hclog.Error)
	if err != nil {
		return cost, err
	}
	defer c.Close()
	time.Sleep(driftStartWait)
	cost.Start = mark.since()
	mark, start := markCPU(), time.Now()
	time.Sleep(window)
	cost.CPU, cost.Window = mark.since(), time.Since(start)
	cost.Load = loadAverage()
	return cost, nil
}

// storm flushes n times in 10 s, alternating nft flush ruleset and an
// iptables-restore of empty nat and filter tables, with RepairEvery 30s;
// then waits until every port answers and checks every attachment.
func (d *driftNet) storm(n int, log *driftLog) (*stormResult, error) {
	s := &stormResult{N: len(d.live), Flushes: n}
	c, err := driftConfigurator(d.conf, d.set.Dir, driftDaemonGap, log, hclog.Info)
	if err != nil {
		return s, err
	}
	defer c.Close()
	time.Sleep(driftStartWait)
	repairs, refused := log.repairCount(), log.refusals()
	mark, start := markCPU(), time.Now()
	tick := time.NewTicker(10 * time.Second / time.Duration(max(n, 1)))
	for i := range n {
		if err := stormKinds[i%len(stormKinds)](); err != nil {
			tick.Stop()
			return s, err
		}
		if i < n-1 {
			<-tick.C
		}
	}
	tick.Stop()
	end := time.Now()
	s.Took = end.Sub(start)
	at, _ := probe(d.ports(len(d.live)), end, 5*time.Minute)
	if _, last, all := repairSpan(at); all {
		s.Recovered = last
	}
	s.CPU, s.Span = mark.since(), time.Since(start)
	for _, t := range at {
		s.Answering += b2i(t > 0)
	}
	ctx, cancel := ctxMinute()
	defer cancel()
	time.Sleep(2 * time.Second) // what answers may still be being repaired
	drifts, err := c.Drifts(ctx)
	if err != nil {
		return s, fmt.Errorf("Drifts after the storm: %w", err)
	}
	s.Whole = wholeOf(drifts)
	s.Repairs, s.Refused = log.repairCount()-repairs, log.refusals()-refused
	s.Load = loadAverage()
	fmt.Fprintf(os.Stderr, "bench:   %s: storm of %d flushes in %s: recovered %s after, %d/%d answering, %d whole; CPU %s; %d repairs, %d refused\n",
		d.set.Name, n, s.Took.Round(time.Millisecond), ms(s.Recovered), s.Answering, s.N, s.Whole, short(s.CPU.Self+s.CPU.Children), s.Repairs, s.Refused)
	return s, nil
}
