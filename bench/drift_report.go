package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// driftSection writes the drift scenario's section of BENCHMARKS.md.
func (r *report) driftSection(w writer) {
	w("## 12. Drift: live attachments kept whole by the repair watcher\n\n")
	w("%s", r.when("drift"))
	ds := r.res.Drift
	if len(ds) == 0 {
		w("(not measured)\n\n")
		return
	}
	d0 := ds[0]
	w("Per plugin set, a network of its own (a /21, one bridge) in the bench's namespace, and %d workloads set up through cninet, each serving TCP on 8080 behind a host port of its own. A port *answers* when a TCP connection from the bench's host namespace to the bridge's address and that port is accepted (200 ms timeout; the ports that do not answer yet are tried again every 5 ms). The watcher is `Config.RepairEvery` of a Configurator of the same owner (docs/drift.md); its log names each attachment it repaired, with the time the line arrived. CPU is the bench process's user + system time and its children's (the plugins, iptables, nft) over the interval: the watcher's, and the bench's probes.\n\n", d0.N)
	machines := make([]string, len(ds))
	for i, d := range ds {
		machines[i] = d.Machine
	}
	w("%s", measuredOn(machines))
	r.driftFlushTable(w)
	r.driftOverheadTable(w)
	r.driftCheckTable(w)
	r.driftIdleTable(w)
	r.driftStormTable(w)
	var failures []string
	for _, d := range ds {
		for _, f := range d.Failures {
			failures = append(failures, fmt.Sprintf("%s: %s", d.Set.Name, f))
		}
	}
	if len(failures) > 0 {
		w("The watcher's warnings and errors (the first %d per plugin set, verbatim):\n\n", driftMaxFailures)
		for _, f := range failures {
			w("- `%s`\n", strings.NewReplacer("`", "'", "\n", " ").Replace(f))
		}
		w("\n")
	}
}

func (r *report) driftFlushTable(w writer) {
	d0 := r.res.Drift[0]
	w("### 12a. Whole-table flushes with %d live attachments\n\n", d0.N)
	w("The watcher's RepairEvery is %s, beyond the run: nf_tables' change notifications alone drive it (every change by iptables-nft and nft arrives there). Each flush is a firewall reload's: `iptables -t nat -F`, `-X`, `-t filter -F`, `-X`, and the same with `ip6tables` (8 processes), or `nft flush ruleset` (which takes iptables-nft's tables too). Times run from the end of the flush (its last process exited) until the first port answers again, until all %d answer, and until the watcher has logged every attachment repaired (the ports answer as soon as portmap's rules are back; the masquerade and forward rules may come a little later). Flushes start %s apart at least, and %s after the last one's recovery: the watcher reports rather than repairs a drift that comes back a fourth time within a minute, so faster flushes would measure that refusal (the storm below does). On the nftables set, the iptables flush takes only the firewall plugin's forward rules (portmap and the masquerade are in nftables): its ports are not cut off, and only the repair is timed. p99 is nearest-rank: of fewer than 100 flushes, the slowest (the flushes column says how many).\n\n",
		driftNotify, d0.N, d0.Gap, driftQuiet)
	w("| plugin set | flush | flushes | ports cut off (median) | first answers p50 / p99 | all %d answer p50 / p99 | all repaired (log) p50 / p99 | repairs per flush (median) | refused | not recovered in %s | CPU per recovery (median) | load (1 min) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", d0.N, driftLimit)
	for _, d := range r.res.Drift {
		for _, f := range d.Flushes {
			first, all := pct2(f.First), pct2(f.All)
			if !f.cutOff() {
				first, all = "not cut off", "not cut off"
			}
			w("| %s | %s | %d | %d | %s | %s | %s | %d | %d | %d | %s | %.1f |\n", d.Set.Name, f.Kind, len(f.Stopped), medianInt(f.Stopped),
				first, all, pct2(f.Whole), medianInt(f.Repairs), f.Refused, f.Unrecovered, cpuMedian(f.CPU), f.Load[0])
		}
	}
	w("\n")
}

// cutOff reports whether the flushes cut the ports off (most of them,
// at the median).
func (f flushSeries) cutOff() bool { return medianInt(f.Stopped) > 0 }

func pct2(s sample) string {
	if len(s) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s", ms(s.percentile(50)), ms(s.percentile(99)))
}

func medianInt(xs []int) int {
	if len(xs) == 0 {
		return 0
	}
	c := slices.Clone(xs)
	slices.Sort(c)
	return c[len(c)/2]
}

// cpuMedian is the median of the process's and its children's CPU.
func cpuMedian(us []cpuUse) string {
	var s sample
	for _, u := range us {
		s = append(s, u.Self+u.Children)
	}
	if len(s) == 0 {
		return "–"
	}
	return ms(s.median())
}

func (r *report) driftOverheadTable(w writer) {
	w("### 12b. Setup+Teardown with RepairEvery on\n\n")
	w("As the overhead scenario (section 1) measures it, on the drift network, with its live workloads there: cninet through a Configurator with RepairEvery %s (cninet daemon's default), whose watcher keeps the live workloads and the measured one whole meanwhile (every cycle changes the ruleset, so it runs passes); go-cni and a second go-cni (the control, the machine's noise) with the same conflist. One unmeasured cycle each, then the cycles interleaved in the six orders of three.\n\n", driftDaemonGap)
	w("| plugin set | live | cycles | cninet median | go-cni median | control median | cninet / go-cni | control / go-cni | repairs meanwhile |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, d := range r.res.Drift {
		o := d.Overhead
		w("| %s | %d | %d | %s | %s | %s | **%.3f×** | %s | %d |\n", d.Set.Name, d.N, len(o.Lib), ms(o.Lib.median()), ms(o.Direct.median()),
			ms(o.Control.median()), ratio(o.Lib.median(), o.Direct.median()), controlRatio(o), d.OverheadRepairs)
	}
	w("\n")
}

func (r *report) driftCheckTable(w writer) {
	w("### 12c. Drifts of every live attachment\n\n")
	w("`Configurator.Drifts(ctx)`: every attachment the registry records as attached, checked in one read of the host (changing nothing), %d calls in a row; then one more through a Configurator opened under the counting shim (section 5), whose processes are counted. nftables is listed over netlink and the devices dumped over rtnetlink: no process; each workload's namespace is entered to read its interface.\n\n", 5)
	w("| plugin set | attachments | whole | Drifts median (min, max) | processes per Drifts |\n|---|---|---|---|---|\n")
	for _, d := range r.res.Drift {
		c := d.Check.sorted()
		if len(c) == 0 {
			continue
		}
		w("| %s | %d | %d | **%s** (%s, %s) | %s |\n", d.Set.Name, d.CheckN, d.CheckWhole, ms(d.Check.median()), ms(c[0]), ms(c[len(c)-1]), d.CheckProcs)
	}
	w("\n")
}

func (r *report) driftIdleTable(w writer) {
	w("### 12d. The watcher idle\n\n")
	w("With the %d workloads live and nothing changing: a Configurator with RepairEvery as given opens (its watcher runs a pass at once), %s pass, then the process's CPU is measured over the window. \"None\" is a Configurator without a watcher: what the bench process costs by itself. A pass every 10 minutes falls outside a window shorter than that: its share is the watcher's idle cost plus one pass's CPU (the start's, below) over 10 minutes, given as \"with one pass\".\n\n",
		r.res.Drift[0].CheckN, driftStartWait)
	w("| plugin set | RepairEvery | window | CPU | share of one core | with one pass per interval | New + the pass at start | load (1 min) |\n|---|---|---|---|---|---|---|---|\n")
	for _, d := range r.res.Drift {
		for _, i := range d.Idle {
			every, amortised := "none", "–"
			if i.Every > 0 {
				every = i.Every.String()
				if i.Every > i.Window {
					amortised = fmt.Sprintf("%.3f%%", 100*i.amortised())
				}
			}
			w("| %s | %s | %s | %s | **%.3f%%** | %s | %s | %.1f |\n", d.Set.Name, every, i.Window.Round(time.Second), ms(i.CPU.Self+i.CPU.Children),
				100*i.share(), amortised, ms(i.Start.Self+i.Start.Children), i.Load[0])
		}
	}
	w("\n")
}

// amortised is the idle share with one pass (the start's CPU) per
// interval added, for an interval longer than the window.
func (i idleCost) amortised() float64 {
	return i.share() + float64(i.Start.Self+i.Start.Children)/float64(i.Every)
}

func (r *report) driftStormTable(w writer) {
	w("### 12e. A storm of flushes\n\n")
	w("With the workloads live and a watcher of RepairEvery %s: flushes every 10 s / their number, alternating `nft flush ruleset` and `iptables-restore` and `ip6tables-restore` of empty nat and filter tables (which flush them and delete their chains: one process per family). Then every port is probed until all answer (5 minutes at most), and Drifts checks every attachment. The watcher runs a pass at most every 500 ms while changes keep coming (up to 2 s apart while they find nothing missing), writes every drifting attachment's iptables rules in one iptables-restore per family and table, and repairs an attachment at most three times within a minute: after that it reports the drift and leaves it until the minute has passed, when a pass of its own repairs it.\n\n", driftDaemonGap)
	w("| plugin set | live | flushes, over | all answer again, after the last flush | answering | whole (Drifts) | repairs | refused | CPU, first flush to all answering (or the limit) | of one core | load (1 min) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, d := range r.res.Drift {
		s := d.Storm
		if s == nil {
			continue
		}
		recovered := ms(s.Recovered)
		if s.Recovered == 0 {
			recovered = "not within 5 minutes"
		}
		span := s.Span
		w("| %s | %d | %d, %s | %s | %d | %d | %d | %d | %s | %.1f%% | %.1f |\n", d.Set.Name, s.N, s.Flushes, s.Took.Round(time.Millisecond), recovered,
			s.Answering, s.Whole, s.Repairs, s.Refused, ms(s.CPU.Self+s.CPU.Children), 100*ratio(s.CPU.Self+s.CPU.Children, span), s.Load[0])
	}
	w("\n")
}

// readsOnce reports whether the processes counted are at most one
// iptables-save per family and nothing else.
func readsOnce(p procCount) bool {
	return p.ByCmd["iptables-save"] <= 1 && p.ByCmd["ip6tables-save"] <= 1 && p.Total == p.ByCmd["iptables-save"]+p.ByCmd["ip6tables-save"]
}

// driftTargets are the scenario's rows of the targets table.
func (r *report) driftTargets(w writer) {
	for _, d := range r.res.Drift {
		for _, f := range d.Flushes {
			if f.cutOff() {
				first, all := f.First.percentile(99), f.All.percentile(99)
				w("| drift, %s, %s with %d live: the first port answers again, p99 ≤ %s | %s (p50 %s) | %s |\n", d.Set.Name, f.Kind, d.N,
					seconds(driftFirst), ms(first), ms(f.First.percentile(50)), verdict(len(f.First) > 0 && f.Unrecovered == 0 && first <= driftFirst))
				w("| drift, %s, %s with %d live: all answer again, p99 ≤ %s | %s (p50 %s) | %s |\n", d.Set.Name, f.Kind, d.N,
					seconds(driftAll), ms(all), ms(f.All.percentile(50)), verdict(len(f.All) > 0 && f.Unrecovered == 0 && all <= driftAll))
				continue
			}
			whole := f.Whole.percentile(99)
			w("| drift, %s, %s with %d live (ports not cut off): all repaired, p99 ≤ %s | %s (p50 %s) | %s |\n", d.Set.Name, f.Kind, d.N,
				seconds(driftAll), ms(whole), ms(f.Whole.percentile(50)), verdict(len(f.Whole) > 0 && f.Unrecovered == 0 && whole <= driftAll))
		}
		o := d.Overhead
		q := ratio(o.Lib.median(), o.Direct.median())
		w("| drift, %s: Setup+Teardown with RepairEvery %s, cninet/go-cni median ≤ %.2f× | %.3f×%s | %s |\n", d.Set.Name, driftDaemonGap, overheadTarget,
			q, controlNote(o), verdict(q <= overheadTarget))
		w("| drift, %s: Drifts of %d live attachments ≤ %s, median | %s | %s |\n", d.Set.Name, d.CheckN, seconds(driftCheck), ms(d.Check.median()),
			verdict(len(d.Check) > 0 && d.Check.median() <= driftCheck && d.CheckWhole == d.CheckN))
		w("| drift, %s: Drifts reads the host once (an iptables-save per family, no other process) | %s | %s |\n", d.Set.Name, d.CheckProcs, verdict(readsOnce(d.CheckProcs)))
		for _, i := range d.Idle {
			if i.Every == 0 {
				continue
			}
			share := i.share()
			if i.Every > i.Window {
				share = i.amortised()
			}
			w("| drift, %s: the watcher idle with %d live, RepairEvery %s: ≤ %.1f%% of one core | %.3f%% | %s |\n", d.Set.Name, d.CheckN, i.Every,
				100*driftIdleShare, 100*share, verdict(share <= driftIdleShare))
		}
		if s := d.Storm; s != nil {
			w("| drift, %s: after a storm of %d flushes in 10 s, every one of %d attachments whole | %d whole, %d answering | %s |\n", d.Set.Name, s.Flushes, s.N,
				s.Whole, s.Answering, verdict(s.Whole == s.N && s.Answering == s.N))
		}
	}
}
