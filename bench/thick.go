package main

import (
	"bytes"
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
)

// thickResult is thick mode measured: libcni's cnitool ADD+DEL through the
// cninet-shim and the daemon vs. cnitool on the delegate conflist
// directly, and the daemon's peak RSS through a burst of concurrent ADDs.
type thickResult struct {
	Set          pluginSet
	Shim, Direct sample // ADD+DEL per cycle
	Burst        int    // concurrent ADDs in the burst
	BurstTook    time.Duration
	BurstFailed  int
	PeakRSS      int64 // the daemon's VmHWM after the burst, bytes
}

// thickTarget is the target ratio of the shim's median to cnitool's on
// the delegate directly.
const thickTarget = 1.03

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
	debugLog               io.Writer // when set, the daemon logs at debug level here
}

// thickScenario: cnitool ADD+DEL through the shim vs. on the delegate, on
// Debian's plugins, interleaved; then a burst of concurrent ADDs (and
// their DELs) through the shim, and the daemon's peak RSS.
func thickScenario(r *report) error {
	rig, err := newThickRig(r.opts.debianSet())
	if err != nil {
		return err
	}
	defer rig.close()
	res := &thickResult{Set: rig.set, Burst: r.opts.thickBurst}
	for _, shim := range []bool{true, false} { // warm-up, not measured
		if _, err := rig.cycle(shim, 28900); err != nil {
			return err
		}
	}
	for i := range r.opts.thickN {
		for _, shim := range []bool{i%2 == 0, i%2 != 0} {
			d, err := rig.cycle(shim, 28901+i%50)
			if err != nil {
				return err
			}
			if shim {
				res.Shim = append(res.Shim, d)
			} else {
				res.Direct = append(res.Direct, d)
			}
		}
	}
	if res.BurstTook, res.BurstFailed, err = rig.burst(res.Burst); err != nil {
		return err
	}
	if res.PeakRSS, err = peakRSS(rig.daemon.Process.Pid); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench:   shim %s, direct %s, ratio %.3f; burst of %d in %s (%d failed), daemon peak RSS %d MiB\n",
		ms(res.Shim.median()), ms(res.Direct.median()), ratio(res.Shim.median(), res.Direct.median()),
		res.Burst, res.BurstTook.Round(time.Millisecond), res.BurstFailed, res.PeakRSS>>20)
	r.res.Thick = res
	return nil
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
		socket: filepath.Join(tmp, "run", "cninet.sock"), cache: filepath.Join("/var/lib/cni", "cninet-bench-daemon")}
	for _, cmd := range []string{"cninet", "cninet-shim"} {
		build := exec.Command("go", "build", "-o", filepath.Join(rig.shimDir, cmd), "./cmd/"+cmd)
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %v\n%s", cmd, err, out)
		}
	}
	cfg, conf, err := benchConf("")
	if err != nil {
		return nil, err
	}
	rig.name = cfg.NetworkName
	for _, dir := range []string{rig.confDir, rig.directNet} {
		if _, err := cninet.WriteConfList(dir, conf); err != nil {
			return nil, err
		}
	}
	shim := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": %q, "plugins": [{"type": "cninet-shim", "socket": %q, "capabilities": {"portMappings": true}}]}`,
		rig.name, rig.socket)
	if err := os.MkdirAll(rig.shimNet, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(rig.shimNet, rig.name+".conflist"), []byte(shim), 0o644); err != nil {
		return nil, err
	}
	return rig, nil
}

// start runs the daemon and waits until it answers on its socket.
func (rig *thickRig) start() error {
	level, log := "warn", io.Writer(os.Stderr)
	if rig.debugLog != nil {
		level, log = "debug", rig.debugLog
	}
	rig.daemon = exec.Command(filepath.Join(rig.shimDir, "cninet"), "daemon", "--socket", rig.socket, "--conf-dir", rig.confDir,
		"--cni-path", rig.set.Dir, "--cache-dir", rig.cache, "--log-level", level)
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
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cnitool %s %s (shim %v): %v: %s", verb, rig.name, shim, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// cycle is one cnitool ADD and DEL of a fresh workload namespace.
func (rig *thickRig) cycle(shim bool, hostPort int) (time.Duration, error) {
	w, err := netsandbox.CreateWorkload()
	if err != nil {
		return 0, err
	}
	defer w.Delete()
	start := time.Now()
	if err := rig.cnitool(shim, "add", w.Path, hostPort); err != nil {
		return 0, err
	}
	if err := rig.cnitool(shim, "del", w.Path, hostPort); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// burst runs n cnitool ADDs through the shim at once, then their DELs,
// and returns how long the ADDs took and how many failed.
func (rig *thickRig) burst(n int) (time.Duration, int, error) {
	workloads := make([]*netsandbox.Workload, n)
	for i := range workloads {
		w, err := netsandbox.CreateWorkload()
		if err != nil {
			return 0, 0, err
		}
		defer w.Delete()
		workloads[i] = w
	}
	var mu sync.Mutex
	failed := 0
	each := func(verb string) {
		var wg sync.WaitGroup
		for i, w := range workloads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := rig.cnitool(true, verb, w.Path, 29000+i); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					fmt.Fprintf(os.Stderr, "bench:   burst %s: %v\n", verb, err)
				}
			}()
		}
		wg.Wait()
	}
	start := time.Now()
	each("add")
	took := time.Since(start)
	each("del")
	return took, failed, nil
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

// thickSection reports thick mode.
func (r *report) thickSection(w writer) {
	w("## 8. Thick mode: cnitool through the cninet-shim and the daemon\n\n")
	w("libcni's `cnitool` (pinned to go.mod's libcni) ADD+DEL of a fresh workload namespace with one port mapping: through the `cninet-shim` plugin and a `cninet daemon` serving the delegate conflist (the default bridge, Debian's plugins), against `cnitool` running the same delegate conflist directly. Interleaved, one unmeasured cycle each first. Then a burst of concurrent ADDs through the shim (each its own namespace and host port), their DELs, and the daemon's peak resident set size (`VmHWM`).\n\n")
	w("%s", r.when("thick"))
	t := r.res.Thick
	if t == nil {
		w("(not measured)\n\n")
		return
	}
	q := ratio(t.Shim.median(), t.Direct.median())
	w("| plugin set | cycles | shim median | p95 | delegate directly median | p95 | ratio (median) | |\n|---|---|---|---|---|---|---|---|\n")
	w("| %s | %d | %s | %s | %s | %s | **%.3f×** | %s |\n\n", t.Set.Name, len(t.Shim), ms(t.Shim.median()), ms(t.Shim.p95()),
		ms(t.Direct.median()), ms(t.Direct.p95()), q, verdict(q <= thickTarget))
	w("Target: ratio of medians ≤ %.2f×. The shim's extra work per command: one process exec and an HTTP request over the unix socket; the daemon runs the same plugins through cninet (prevention, DEL, force cleanup), with its own libcni cache.\n\n", thickTarget)
	w("Burst: %d concurrent ADDs through the shim took %s (%d failed); the daemon's peak RSS over the whole run was %.1f MiB.\n\n",
		t.Burst, t.BurstTook.Round(time.Millisecond), t.BurstFailed, float64(t.PeakRSS)/(1<<20))
}
