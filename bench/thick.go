package main

import (
	"bytes"
	"crypto/sha512"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/thick"
	"github.com/seed1280861d/cninet/internal/thickwire"
)

// thickResult is thick mode measured: libcni's cnitool ADD+DEL through the
// cninet-shim and the daemon vs. cnitool on the delegate conflist
// directly, where the shim's time goes, bursts of concurrent ADDs (and
// their DELs) both ways, and the daemon's peak RSS.
type thickResult struct {
	Set          pluginSet
	Machine      string // where it was measured
	Command      string // the bench's command line
	Shim, Direct sample // ADD+DEL per cycle, the first run
	// Split is each shim cycle taken apart (the cycles of Shim, in order).
	Split []thickSplit
	// Repeats are the runs of cycles after the first (-thick-runs), each
	// judged on its own: the target holds in every run.
	Repeats []thickRun
	// ShimStart is cninet-shim started alone (CNI_COMMAND=VERSION): fork,
	// exec, the Go runtime's start, and exit, as its caller waits for it.
	ShimStart sample
	// EmptyStart is an empty Go program (package main, func main(){}),
	// built by the same toolchain, started the same way, interleaved
	// with ShimStart: the floor the shim's start-up is held to.
	EmptyStart sample
	CyclesLoad [2]string // /proc/loadavg before and after the cycles

	Burst    int        // concurrent ADDs per burst
	Bursts   []burstRun // alternating which contender goes first
	BurstRSS int64      // the daemon's VmHWM after the bursts (its whole life until then), bytes

	Peak    int      // concurrent ADDs through the shim in the peak run
	PeakRun burstRun // its ADDs and DELs
	// PeakRSS is the daemon's VmHWM over the peak run alone (reset before
	// it through /proc/PID/clear_refs), bytes; PeakReset says whether the
	// reset took (else it is the daemon's whole life).
	PeakRSS   int64
	PeakReset bool
}

// thickSplit is one shim cycle taken apart: cnitool's wall time per
// command as the bench saw it, and what the daemon's log says of the same
// requests (its request line: duration and queued; cninet's debug lines:
// the phases).
type thickSplit struct {
	Add, Del time.Duration // cnitool, from its start to its exit
	// Daemon is the daemon's time for the ADD and the DEL (request …
	// duration=: from the request's headers read to its answer written),
	// Queued the part of it spent waiting for a slot.
	Daemon, Queued time.Duration
	// Before is, summed over ADD and DEL, from cnitool's start to the
	// daemon's handling start (the log line's time minus its duration):
	// cnitool's own start and its conflist, the shim's exec and start,
	// the dial and the request. After: from the daemon's answer to
	// cnitool's exit (the answer's transfer, the shim's conversion and
	// exit, cnitool's output and exit). Timestamps of the log are in ms.
	Before, After time.Duration
	Phases        cyclePhases // cninet in the daemon
	// AddHandoff and DelHandoff are each command taken apart at every
	// step on both sides (thick_handoff.go).
	AddHandoff, DelHandoff handoff
}

// thickRun is one run of interleaved cycles, shim and direct.
type thickRun struct {
	Shim, Direct sample
	Load         [2]string // /proc/loadavg before and after
}

// call judges a run's shim/direct against thickTarget at its noise:
// there is no control, so the pairs of shim and direct cycles stand for
// it.
func (t thickRun) call() ratioCall {
	return callRatio(t.Shim, t.Direct, spread(t.Direct, t.Shim), thickTarget)
}

// runs are every run of cycles, the first (the one taken apart) first.
func (t *thickResult) runs() []thickRun {
	return append([]thickRun{{Shim: t.Shim, Direct: t.Direct, Load: t.CyclesLoad}}, t.Repeats...)
}

// verdict is the target's in every run: missed if one run missed it,
// met if every run met it, else not measurable.
func (t *thickResult) verdict() string {
	met := true
	for _, run := range t.runs() {
		switch c := run.call(); {
		case c.told() && c.Q > c.Target:
			return "**missed**"
		case !c.told():
			met = false
		}
	}
	if met {
		return "met"
	}
	return "not measurable in every run (a run within the noise of its target)"
}

// plugins is the plugins' time in the daemon: cninet's ADD and DEL, each
// libcni running the delegate chain.
func (s thickSplit) plugins() time.Duration { return s.Phases.Add + s.Phases.Del }

// cninetOwn is cninet's own work in the daemon around the plugins: the
// registry, the prevention before the DEL, the force cleanup after it,
// the locks and the finding of the attachments.
func (s thickSplit) cninetOwn() time.Duration {
	p := s.Phases
	return p.Registry.Setup + p.Registry.Removal + p.Prevent + p.Cleanup + p.SetupLock + p.SetupFind + p.TeardownLock + p.TeardownFind
}

// daemonRest is the daemon's time that neither the queue nor cninet's
// timed phases explain: decoding the request, Serve's checks, reading
// the cached result and encoding the answer.
func (s thickSplit) daemonRest() time.Duration {
	return s.Daemon - s.Queued - s.plugins() - s.cninetOwn()
}

// burstRun is n cnitool ADDs at once, through the shim or on the
// delegate, then their DELs at once.
type burstRun struct {
	Shim                 bool
	N                    int
	Add, Del             time.Duration
	AddFailed, DelFailed int
	Load                 string // /proc/loadavg before it
}

// thickTarget is the target ratio of the shim's median to cnitool's on
// the delegate directly; thickBurstTarget the same of a burst's ADDs;
// thickRSSTarget the daemon's peak RSS at -thick-peak requests at once.
const (
	thickTarget      = 1.03
	thickBurstTarget = 1.00
	thickRSSTarget   = 64 << 20
)

// thickSubnet holds the burst of -thick-peak workloads at once (a /24
// does not); it lies apart from the benchConf networks' 198.18.N.0/24.
const thickSubnet = "198.18.252.0/22"

// thickRig is a cninet daemon serving one delegate network, the shim, and
// two conf dirs for cnitool: the shim's conflist and the delegate's.
type thickRig struct {
	set                    pluginSet
	tool, shimDir          string
	shimNet, directNet     string // NETCONFPATH for each contender
	name                   string
	daemon                 *exec.Cmd
	exited                 chan error
	socket, confDir, cache string
	debugLog               io.Writer // when set, the daemon's log is also written here
	log                    *thickLog
	// shimTimes is the file the shims write their moments to
	// (CNINET_SHIM_TIMES), read from shimTimesRead on.
	shimTimes     string
	shimTimesRead int64
}

// thickScenario: cnitool ADD+DEL through the shim vs. on the delegate, on
// Debian's plugins, interleaved, each shim cycle taken apart with the
// daemon's log; then bursts of concurrent ADDs (and their DELs) through
// the shim and on the delegate, alternating; then -thick-peak ADDs at
// once through the shim, and the daemon's peak RSS over them.
func thickScenario(r *report) error {
	rig, err := newThickRig(r.opts.debianSet())
	if err != nil {
		return err
	}
	defer rig.close()
	res := &thickResult{Set: rig.set, Machine: machine(), Command: "go run . " + strings.Join(os.Args[1:], " "), Burst: r.opts.thickBurst, Peak: r.opts.thickPeak}
	for _, shim := range []bool{true, false} { // warm-up, not measured
		if _, err := rig.cycle(shim, 28900); err != nil {
			return err
		}
	}
	rig.log.forget()
	first, err := rig.cycles(r, &res.Split)
	if err != nil {
		return err
	}
	res.Shim, res.Direct, res.CyclesLoad = first.Shim, first.Direct, first.Load
	for range r.opts.thickRuns - 1 {
		run, err := rig.cycles(r, nil)
		if err != nil {
			return err
		}
		res.Repeats = append(res.Repeats, run)
	}
	if res.ShimStart, res.EmptyStart, err = rig.shimStarts(r.opts.thickN); err != nil {
		return err
	}
	for round := range r.opts.thickRounds {
		for _, shim := range []bool{round%2 == 0, round%2 != 0} {
			b, err := rig.burst(shim, res.Burst)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "bench:   burst of %d (shim %v): ADDs %s (%d failed), DELs %s (%d failed), load before %s\n",
				b.N, b.Shim, b.Add.Round(time.Millisecond), b.AddFailed, b.Del.Round(time.Millisecond), b.DelFailed, b.Load)
			res.Bursts = append(res.Bursts, b)
		}
	}
	if res.BurstRSS, err = peakRSS(rig.daemon.Process.Pid); err != nil {
		return err
	}
	if res.Peak > 0 {
		res.PeakReset = resetPeakRSS(rig.daemon.Process.Pid) == nil
		if res.PeakRun, err = rig.burst(true, res.Peak); err != nil {
			return err
		}
		if res.PeakRSS, err = peakRSS(rig.daemon.Process.Pid); err != nil {
			return err
		}
		b := res.PeakRun
		fmt.Fprintf(os.Stderr, "bench:   peak run of %d through the shim: ADDs %s (%d failed), DELs %s (%d failed), load before %s; daemon VmHWM %.1f MiB (reset before: %v; after the bursts: %.1f MiB)\n",
			b.N, b.Add.Round(time.Millisecond), b.AddFailed, b.Del.Round(time.Millisecond), b.DelFailed, b.Load,
			float64(res.PeakRSS)/(1<<20), res.PeakReset, float64(res.BurstRSS)/(1<<20))
	}
	r.res.Thick = res
	return nil
}

// cycles is one run of interleaved cycles, shim and direct alternating
// which goes first, -thick-n of them or more while the ratio is within
// the noise of its target (-noise-cap); split, when not nil, gets each
// shim cycle taken apart.
func (rig *thickRig) cycles(r *report, split *[]thickSplit) (thickRun, error) {
	run := thickRun{Load: [2]string{loadavg()}}
	for i, n := 0, r.opts.thickN; ; i++ {
		if i >= n {
			q := ratio(run.Shim.median(), run.Direct.median())
			more := moreCycles(q, thickTarget, spread(run.Direct, run.Shim), i, 2, r.opts.noiseCap*r.opts.thickN)
			if more == 0 {
				break
			}
			fmt.Fprintf(os.Stderr, "bench:   shim/direct %.3f is within ±%.1f %% of its target after %d cycles: %d more\n",
				q, 100*noiseMargin(spread(run.Direct, run.Shim), i), i, more)
			n = i + more
		}
		for _, shim := range []bool{i%2 == 0, i%2 != 0} {
			c, err := rig.cycle(shim, 28901+i%50)
			if err != nil {
				return run, err
			}
			if !shim {
				run.Direct = append(run.Direct, c.Add+c.Del)
				continue
			}
			run.Shim = append(run.Shim, c.Add+c.Del)
			if split != nil {
				*split = append(*split, c)
			}
		}
	}
	run.Load[1] = loadavg()
	fmt.Fprintf(os.Stderr, "bench:   shim %s, direct %s, ratio %.3f (load %s → %s)\n", ms(run.Shim.median()), ms(run.Direct.median()),
		ratio(run.Shim.median(), run.Direct.median()), run.Load[0], run.Load[1])
	return run, nil
}

func newThickRig(set pluginSet) (*thickRig, error) {
	rig, err := prepareThickRig(set)
	if err != nil {
		return nil, err
	}
	return rig, rig.start()
}

// prepareThickRig builds the daemon and the shim and writes the conf dirs,
// for start to run the daemon (after a caller changed its log).
func prepareThickRig(set pluginSet) (*thickRig, error) {
	tool, err := filepath.Abs("../.cache/bin/cnitool")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(tool); err != nil {
		return nil, fmt.Errorf("libcni's cnitool (run scripts/install-deps.sh): %w", err)
	}
	tmp, err := os.MkdirTemp("", "cninet-bench-thick-")
	if err != nil {
		return nil, err
	}
	rig := &thickRig{set: set, tool: tool, shimDir: filepath.Join(tmp, "bin"), shimNet: filepath.Join(tmp, "shim.d"),
		directNet: filepath.Join(tmp, "direct.d"), confDir: filepath.Join(tmp, "delegates"),
		socket: filepath.Join(tmp, "run", "cninet.sock"), cache: filepath.Join("/var/lib/cni", "cninet-bench-daemon"),
		log: newThickLog(), shimTimes: filepath.Join(tmp, "shim-times.log")}
	for _, cmd := range []string{"cninet", "cninet-shim"} {
		build := exec.Command("go", "build", "-o", filepath.Join(rig.shimDir, cmd), "./cmd/"+cmd)
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v\n%s", cmd, err, out)
		}
	}
	cfg, _, err := benchConf("")
	if err != nil {
		return nil, err
	}
	cfg.IPv4Subnet = thickSubnet
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil {
		return nil, err
	}
	rig.name = cfg.NetworkName
	for _, dir := range []string{rig.confDir, rig.directNet} {
		if _, err := cninet.WriteConfList(dir, conf); err != nil {
			return nil, err
		}
	}
	// The peak run queues -thick-peak requests in the daemon at once; a
	// deadline past the default 2 min lets the last of them be served
	// rather than refused, so that all are held at once.
	shim := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [{"type": "cninet-shim", "socket": %q, "timeout": %q, "capabilities": {"portMappings": true}}]}`,
		rig.name, rig.socket, thickTimeout.String())
	if err := os.MkdirAll(rig.shimNet, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(rig.shimNet, rig.name+".conflist"), []byte(shim), 0o644); err != nil {
		return nil, err
	}
	return rig, nil
}

// thickTimeout is the daemon's and the shim's request deadline in the
// bench (see newThickRig).
const thickTimeout = 30 * time.Minute

// start runs the daemon and waits until it answers on its socket. It logs
// at debug level: the request lines (info) and cninet's phases (debug)
// are what the split of a shim cycle reads.
func (rig *thickRig) start() error {
	log := io.Writer(rig.log)
	if rig.debugLog != nil {
		log = io.MultiWriter(rig.log, rig.debugLog)
	}
	rig.daemon = exec.Command(filepath.Join(rig.shimDir, "cninet"), "daemon", "--socket", rig.socket, "--conf-dir", rig.confDir,
		"--cni-path", rig.set.Dir, "--cache-dir", rig.cache, "--log-level", "debug", "--timeout", thickTimeout.String())
	rig.daemon.Stderr = log
	if err := rig.daemon.Start(); err != nil {
		return err
	}
	rig.exited = make(chan error, 1)
	go func() { rig.exited <- rig.daemon.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-rig.exited:
			return fmt.Errorf("cninet daemon exited at start: %v", err)
		default:
		}
		if conn, err := net.Dial("unix", rig.socket); err == nil {
			conn.Close()
			return nil
		}
	}
	return fmt.Errorf("cninet daemon did not listen on %s within 20s", rig.socket)
}

// close stops the daemon (SIGTERM: it drains) and removes what the rig made.
func (rig *thickRig) close() {
	if rig.daemon != nil && rig.daemon.Process != nil {
		rig.daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-rig.exited:
		case <-time.After(40 * time.Second):
			rig.daemon.Process.Kill()
		}
	}
	os.RemoveAll(filepath.Dir(rig.shimDir))
	os.RemoveAll(rig.cache)
}

// cnitool runs cnitool verb on netns, through the shim or on the delegate.
func (rig *thickRig) cnitool(shim bool, verb, netns string, hostPort int) error {
	cmd := exec.Command(rig.tool, verb, rig.name, netns)
	netconf, path := rig.directNet, rig.set.Dir
	if shim {
		netconf, path = rig.shimNet, rig.shimDir
	}
	cmd.Env = append(os.Environ(), "NETCONFPATH="+netconf, "CNI_PATH="+path,
		fmt.Sprintf(`CAP_ARGS={"portMappings": [{"hostPort": %d, "containerPort": 8080, "protocol": "tcp"}]}`, hostPort))
	if shim {
		cmd.Env = append(cmd.Env, thickwire.ShimTimesEnv+"="+rig.shimTimes)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cnitool %s %s (shim %v): %v: %s", verb, rig.name, shim, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// cnitoolID is the container id cnitool gives a workload in netns: its
// name for the attachment, in the daemon's log lines.
func cnitoolID(netns string) string {
	s := sha512.Sum512([]byte(netns))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

// cycle is one cnitool ADD and DEL of a fresh workload namespace; through
// the shim, it is taken apart with the daemon's log.
func (rig *thickRig) cycle(shim bool, hostPort int) (thickSplit, error) {
	var c thickSplit
	w, err := netsandbox.CreateWorkload()
	if err != nil {
		return c, err
	}
	defer w.Delete()
	addStart := time.Now()
	if err := rig.cnitool(shim, "add", w.Path, hostPort); err != nil {
		return c, err
	}
	delStart := time.Now()
	c.Add = delStart.Sub(addStart)
	if err := rig.cnitool(shim, "del", w.Path, hostPort); err != nil {
		return c, err
	}
	end := time.Now()
	c.Del = end.Sub(delStart)
	if !shim {
		return c, nil
	}
	id := cnitoolID(w.Path)
	add, del, err := rig.log.requestsOf(id, 5*time.Second)
	if err != nil {
		return c, err
	}
	c.Daemon, c.Queued = add.duration+del.duration, add.queued+del.queued
	c.Before = add.start().Sub(addStart) + del.start().Sub(delStart)
	c.After = delStart.Sub(add.at) + end.Sub(del.at)
	c.Phases = rig.log.phasesOf(id)
	shims, read, err := shimTimes(rig.shimTimes, rig.shimTimesRead)
	if err != nil {
		return c, err
	}
	rig.shimTimesRead = read
	c.AddHandoff = handoffOf(addStart, delStart, shims[id+" ADD"], add.steps)
	c.DelHandoff = handoffOf(delStart, end, shims[id+" DEL"], del.steps)
	return c, nil
}

// shimStarts times n runs of cninet-shim alone (CNI_COMMAND=VERSION):
// the process start and exit a shim request pays on top of its work.
func (rig *thickRig) shimStarts(n int) (shim, empty sample, err error) {
	emptyBin, err := buildEmptyProgram(rig.shimDir)
	if err != nil {
		return nil, nil, err
	}
	run := func(bin string) (time.Duration, error) {
		cmd := exec.Command(bin)
		cmd.Env = []string{"CNI_COMMAND=VERSION"}
		cmd.Stdin = strings.NewReader(`{"cniVersion": "1.0.0"}`)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("%s VERSION: %v: %s", filepath.Base(bin), err, out)
		}
		return time.Since(start), nil
	}
	for i := range n {
		for _, isShim := range []bool{i%2 == 0, i%2 != 0} {
			bin := emptyBin
			if isShim {
				bin = filepath.Join(rig.shimDir, "cninet-shim")
			}
			d, err := run(bin)
			if err != nil {
				return nil, nil, err
			}
			if isShim {
				shim = append(shim, d)
			} else {
				empty = append(empty, d)
			}
		}
	}
	return shim, empty, nil
}

// shimStartSlack is how much longer than an empty Go program the shim
// may take to start and exit (issue 41).
const shimStartSlack = 300 * time.Microsecond

// buildEmptyProgram builds `package main; func main() {}` into dir.
func buildEmptyProgram(dir string) (string, error) {
	src := filepath.Join(dir, "empty-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module empty\n"), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "empty")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building an empty Go program: %v\n%s", err, out)
	}
	return bin, nil
}

// burst runs n cnitool ADDs at once, through the shim or on the
// delegate, then their DELs at once; failures are counted, not fatal.
func (rig *thickRig) burst(shim bool, n int) (burstRun, error) {
	b := burstRun{Shim: shim, N: n}
	workloads := make([]*netsandbox.Workload, n)
	for i := range workloads {
		w, err := netsandbox.CreateWorkload()
		if err != nil {
			return b, err
		}
		defer w.Delete()
		workloads[i] = w
	}
	each := func(verb string) (time.Duration, int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		failed := 0
		start := time.Now()
		for i, w := range workloads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := rig.cnitool(shim, verb, w.Path, 29000+i); err != nil {
					mu.Lock()
					failed++
					if failed <= 3 {
						fmt.Fprintf(os.Stderr, "bench:   burst %s: %v\n", verb, err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return time.Since(start), failed
	}
	b.Load = loadavg()
	b.Add, b.AddFailed = each("add")
	b.Del, b.DelFailed = each("del")
	rig.log.forget()
	return b, nil
}

// loadavg is the machine's load, recorded with each number:
// /proc/loadavg's 1, 5 and 15 minute averages and the processes runnable
// now of all (the averages lag: after a burst they still count it).
func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) < 4 {
		return "?"
	}
	return strings.Join(f[:3], " ") + ", runnable " + f[3]
}

// peakRSS is the peak resident set size of process pid (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// resetPeakRSS sets process pid's VmHWM back to its resident set size
// now (proc(5): clear_refs, 5), so that a later peakRSS is the peak since.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0o200)
}

// thickSection reports thick mode.
func (r *report) thickSection(w writer) {
	w("## 8. Thick mode: cnitool through the cninet-shim and the daemon\n\n")
	w("libcni's `cnitool` (pinned to go.mod's libcni) ADD+DEL of a fresh workload namespace with one port mapping: through the `cninet-shim` plugin and a `cninet daemon` serving the delegate conflist (the default bridge, Debian's plugins), against `cnitool` running the same delegate conflist directly. Interleaved, one unmeasured cycle each first. Then bursts of concurrent ADDs (each its own namespace and host port) and their DELs, through the shim and on the delegate directly, alternating which goes first; then a larger burst through the shim over which the daemon's peak resident set size (`VmHWM`) is measured. The daemon logs at debug level (its request lines and cninet's phases are what the split below reads) and runs with `--timeout %s` (the shim's conflist says the same), so that the larger burst's last requests are served rather than refused at the default 2 min deadline.\n\n", thickTimeout)
	w("%s", r.when("thick"))
	t := r.res.Thick
	if t == nil {
		w("(not measured)\n\n")
		return
	}
	if t.Command != "" {
		w("Measured on %s with `cd bench && %s` (machine load, 1/5/15 min averages and processes runnable of all: before the cycles %s; after %s).\n\n", t.Machine, t.Command, t.CyclesLoad[0], t.CyclesLoad[1])
	}
	runs := t.runs()
	if len(runs) > 1 {
		w("%d runs of interleaved cycles, one after the other, each extended on its own while its ratio is within the noise of the target; the first is the one taken apart below.\n\n", len(runs))
	}
	w("| plugin set | run | cycles | shim median | p95 | delegate directly median | p95 | ratio (median) | | paired ratio | shim − directly (paired mean) | load before → after |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, run := range runs {
		w("| %s | %d | %d | %s | %s | %s | %s | **%.3f×** | %s | %.3f× | %s | %s → %s |\n", t.Set.Name, i+1, len(run.Shim), ms(run.Shim.median()), ms(run.Shim.p95()),
			ms(run.Direct.median()), ms(run.Direct.p95()), ratio(run.Shim.median(), run.Direct.median()), run.call().verdict(),
			pairedRatio(run.Shim, run.Direct), pairedString(run.Shim, run.Direct), run.Load[0], run.Load[1])
	}
	w("\nTarget: ratio of medians ≤ %.2f× in every run: %s. The shim's extra work per command: one process exec and an HTTP request over the unix socket; the daemon runs the same plugins through cninet (registry, prevention, DEL, force cleanup), with its own libcni cache.\n\n", thickTarget, t.verdict())
	if len(t.Split) > 0 && t.Split[0].AddHandoff.Parts != nil {
		r.handoffTable(w, t)
	} else {
		r.thickSplitTable(w, t)
	}
	r.thickBurstTable(w, t)
}

// thickSplitTable takes the shim's cycle apart.
func (r *report) thickSplitTable(w writer, t *thickResult) {
	if len(t.Split) == 0 {
		return
	}
	part := func(f func(thickSplit) time.Duration) time.Duration {
		var s sample
		for _, c := range t.Split {
			s = append(s, f(c))
		}
		return s.median()
	}
	shim := t.Shim.median()
	plugins := part(thickSplit.plugins)
	row := func(name string, d time.Duration) {
		w("| %s | %s | %.1f%% |\n", name, msFine(d), 100*float64(d)/float64(shim))
	}
	w("Where a cycle through the shim goes (medians over its %d cycles, ADD and DEL summed; medians do not add up exactly). The daemon's part is read from its log: its request line per command (`request: … duration= queued=`) and cninet's debug lines (as in section 1); the part outside the daemon from the bench's clock against the request line's time (whole milliseconds in the log: each boundary is ±0.5 ms).\n\n", len(t.Split))
	w("| part of the shim's cycle | median | share |\n|---|---|---|\n")
	row("cnitool ADD+DEL through the shim (whole cycle)", shim)
	row("outside the daemon, before it handles the request: cnitool's start and conflist, the shim's exec and start, dial and request", part(func(c thickSplit) time.Duration { return c.Before }))
	row("outside the daemon, after its answer: the answer's transfer, the shim's result conversion and exit, cnitool's output and exit", part(func(c thickSplit) time.Duration { return c.After }))
	row("in the daemon (request duration)", part(func(c thickSplit) time.Duration { return c.Daemon }))
	row("  of it: waiting for a slot (queued)", part(func(c thickSplit) time.Duration { return c.Queued }))
	row("  of it: the plugins (cninet's ADD and DEL: libcni running the delegate chain)", plugins)
	row("  of it: the host registry (record before and after the ADD, removal after the DEL)", part(func(c thickSplit) time.Duration { return c.Phases.Registry.Setup + c.Phases.Registry.Removal }))
	row("  of it: the prevention before the DEL (the registry's proof in it)", part(func(c thickSplit) time.Duration { return c.Phases.Prevent }))
	row("  of it: the force cleanup after the DEL", part(func(c thickSplit) time.Duration { return c.Phases.Cleanup }))
	row("  of it: the allocation's locks and finding its attachments", part(func(c thickSplit) time.Duration {
		return c.Phases.SetupLock + c.Phases.SetupFind + c.Phases.TeardownLock + c.Phases.TeardownFind
	}))
	row("  of it: the rest (decoding, checks, reading the cached result, encoding the answer)", part(thickSplit.daemonRest))
	w("\n")
	start := t.ShimStart.median()
	direct := t.Direct.median()
	w("For comparison: `cninet-shim` started alone (`CNI_COMMAND=VERSION`, fork to exit, median of %d) takes %s, so %s of a cycle's two commands. cnitool on the delegate directly takes %s a cycle; less the plugins' time as the daemon logs it (the same plugins, run by the same libcni), cnitool's own share is about %s. The shim's cycle less the plugins is %s: what the thick path adds over cnitool's own share is about %s a cycle, of which the shim's two starts are %s and cninet's own work in the daemon (registry, prevention, cleanup, locks) %s.\n\n",
		len(t.ShimStart), msFine(start), msFine(2*start), ms(direct), ms(direct-plugins), ms(shim-plugins), ms(shim-direct), msFine(2*start),
		msFine(part(thickSplit.cninetOwn)))
	w("The target's %.0f%% of cnitool's cycle on the delegate directly is %s a cycle here: the budget for everything the thick path adds. Two process starts of a Go program (the shim; any CNI plugin pays one) are in it by design, and they grow with the machine's load, as every hand-off between processes does; the daemon's own work beyond the plugins (registry with its fsync, prevention, force cleanup, the request itself) is the part cninet controls.\n\n",
		100*(thickTarget-1), ms(time.Duration((thickTarget-1)*float64(direct))))
}

// thickBurstTable reports the bursts and the daemon's peak RSS.
func (r *report) thickBurstTable(w writer, t *thickResult) {
	var shimAdd, directAdd, shimDel, directDel sample
	failed := 0
	if len(t.Bursts) > 0 {
		w("Bursts of %d concurrent cnitool ADDs, then their DELs at once, through the shim and on the delegate directly, in rounds alternating which goes first (load before each burst: the 1/5/15 min averages, which lag and so still count the burst before, and the processes runnable then of all):\n\n", t.Burst)
		w("| round | contender | ADDs took | failed | DELs took | failed | load before |\n|---|---|---|---|---|---|---|\n")
		for i, b := range t.Bursts {
			who := "delegate directly"
			if b.Shim {
				who = "through the shim"
				shimAdd, shimDel = append(shimAdd, b.Add), append(shimDel, b.Del)
			} else {
				directAdd, directDel = append(directAdd, b.Add), append(directDel, b.Del)
			}
			failed += b.AddFailed + b.DelFailed
			w("| %d | %s | %s | %d | %s | %d | %s |\n", i/2+1, who, b.Add.Round(time.Millisecond), b.AddFailed, b.Del.Round(time.Millisecond), b.DelFailed, b.Load)
		}
		qa, qd := ratio(shimAdd.median(), directAdd.median()), ratio(shimDel.median(), directDel.median())
		w("\nMedian over the rounds: ADDs through the shim %s, directly %s: **%.3f×** (target ≤ %.2f×: %s); DELs %s / %s: %.3f×; %d failed in all.\n\n",
			shimAdd.median().Round(time.Millisecond), directAdd.median().Round(time.Millisecond), qa, thickBurstTarget, verdict(qa <= thickBurstTarget),
			shimDel.median().Round(time.Millisecond), directDel.median().Round(time.Millisecond), qd, failed)
		w("The daemon runs at most `--max-concurrent` (%d) requests at once and queues the rest; cnitool on the delegate directly starts every plugin chain at once, and they contend for the xtables lock and the CPU.\n\n", thick.DefaultMaxConcurrent)
	}
	if t.Peak > 0 {
		b := t.PeakRun
		since := "since it was reset (`/proc/PID/clear_refs`) just before the burst"
		if !t.PeakReset {
			since = "over its whole life (the reset through `/proc/PID/clear_refs` failed)"
		}
		w("Peak: %d concurrent cnitool ADDs through the shim took %s (%d failed), their DELs %s (%d failed), load before %s. The daemon's peak RSS %s: **%.1f MiB** (target ≤ %d MiB: %s); over the earlier cycles and bursts it was %.1f MiB.\n\n",
			b.N, b.Add.Round(time.Millisecond), b.AddFailed, b.Del.Round(time.Millisecond), b.DelFailed, b.Load, since,
			float64(t.PeakRSS)/(1<<20), thickRSSTarget>>20, verdict(t.PeakRSS <= thickRSSTarget), float64(t.BurstRSS)/(1<<20))
	}
}

// thickTargets are thick mode's rows of the targets table.
func (r *report) thickTargets(w writer) {
	t := r.res.Thick
	if t == nil {
		return
	}
	var qs []string
	for _, run := range t.runs() {
		qs = append(qs, fmt.Sprintf("%.3f×", ratio(run.Shim.median(), run.Direct.median())))
	}
	w("| thick mode, %s: cnitool through the shim / on the delegate, median ≤ %.2f× in every run (%s) | %s | %s |\n", t.Set.Name, thickTarget, count(len(qs), "run"), strings.Join(qs, ", "), t.verdict())
	var shimAdd, directAdd sample
	for _, b := range t.Bursts {
		if b.Shim {
			shimAdd = append(shimAdd, b.Add)
		} else {
			directAdd = append(directAdd, b.Add)
		}
	}
	if len(shimAdd) > 0 && len(directAdd) > 0 {
		q := ratio(shimAdd.median(), directAdd.median())
		w("| thick mode: %d concurrent ADDs through the shim / on the delegate, median over %d rounds ≤ %.2f× | %.3f× | %s |\n", t.Burst, len(shimAdd), thickBurstTarget, q, verdict(q <= thickBurstTarget))
	}
	if added, ok := r.handoffTable(func(string, ...any) {}, t); ok {
		rem := unexplained(t, added)
		w("| thick mode: the shim's cycle over the delegate's (paired mean) less what the thick path's parts explain, ≤ %s | %s | %s |\n",
			msFine(unexplainedTarget), rem, rem.verdict(unexplainedTarget))
	}
	if len(t.EmptyStart) > 0 {
		d := t.ShimStart.median() - t.EmptyStart.median()
		w("| thick mode: cninet-shim's start-up (VERSION, fork to exit) within %s of an empty Go program's | %s vs. %s: %+.2f ms | %s |\n",
			msFine(shimStartSlack), msFine(t.ShimStart.median()), msFine(t.EmptyStart.median()), float64(d)/1e6, verdict(d <= shimStartSlack))
	}
	if t.Peak > 0 {
		w("| thick mode: the daemon's peak RSS (VmHWM) at %d concurrent requests ≤ %d MiB | %.1f MiB | %s |\n", t.Peak, thickRSSTarget>>20, float64(t.PeakRSS)/(1<<20), verdict(t.PeakRSS <= thickRSSTarget))
	}
}

// count is n nouns, in the plural unless n is 1: "1 run", "3 runs".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
