package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seed1280861d/cninet/internal/cririg"
	"golang.org/x/sys/unix"
)

// criResult is thick mode under a real runtime: `crictl runp`, `stopp`
// and `rmp` of a pod with a hostPort, containerd's CRI plugin networking
// it through the cninet-shim conflist (the daemon running the delegate)
// vs. through the delegate conflist directly.
type criResult struct {
	Set          pluginSet
	Shim, Direct criSample
	Daemon       criDaemon  // the shim contender's cycles, as the daemon's debug log tells them
	LoadBefore   [3]float64 // load averages when the scenario started measuring
	LoadAfter    [3]float64 // and when it finished
}

// criSample is one contender's cycles, each phase timed alone.
type criSample struct {
	Runp, Stopp, Rmp sample
}

// criDaemon is what the cninet daemon logged for each crictl command of
// the shim contender's cycles: its requests' durations (from a request's
// arrival to its answer) and, inside them, cninet's phases.
type criDaemon struct {
	Runp, Stopp, Rmp criDaemonSample
}

// criDaemonSample is one crictl command's daemon time, per cycle.
type criDaemonSample struct {
	Requests sample // the sum of the requests' durations
	Plugins  sample // the delegate's plugins: the ADD chain, or the DEL
	Prevent  sample // prevention before DEL
	Cleanup  sample // force cleanup after DEL
	Count    []int  // requests the daemon served
}

func (s *criDaemonSample) add(l criLogged) {
	s.Requests, s.Plugins = append(s.Requests, l.requests), append(s.Plugins, l.phases.Add+l.phases.Del)
	s.Prevent, s.Cleanup, s.Count = append(s.Prevent, l.phases.Prevent), append(s.Cleanup, l.phases.Cleanup), append(s.Count, l.count)
}

// criLog reads the daemon's debug log: per window (one crictl command),
// its requests and cninet's phases.
type criLog struct {
	mu    sync.Mutex
	lines lineSplitter
	now   criLogged
}

// criLogged is what the daemon logged in one window.
type criLogged struct {
	requests time.Duration
	count    int
	phases   cyclePhases
}

// requestField is the daemon's one line per request: its duration.
var requestField = regexp.MustCompile(`cninet-daemon: request: .*duration="?([^"\s]+)`)

// Write takes what the daemon wrote, line by line. Its warnings and errors
// reach the bench's stderr through the thick rig's own log (thickLog).
func (l *criLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines.feed(p, func(line []byte) {
		l.now.phases.addLine(line)
		if d, ok := logDuration(requestField, line); ok {
			l.now.requests += d
			l.now.count++
		}
	})
	return len(p), nil
}

// take returns what was logged since the last take.
func (l *criLog) take() criLogged {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now
	l.now = criLogged{}
	return now
}

// total is runp+stopp+rmp per cycle.
func (s criSample) total() sample {
	t := make(sample, len(s.Runp))
	for i := range t {
		t[i] = s.Runp[i] + s.Stopp[i] + s.Rmp[i]
	}
	return t
}

// criTarget is the target ratio of the medians of runp+stopp+rmp, through
// the shim over the delegate directly.
const criTarget = 1.02

// criPauseImage is the sandbox image, built from the host's busybox.
const criPauseImage = "localhost/cninet-bench-pause:latest"

// criConfName is the one conflist in containerd's CNI conf dir; switching
// contenders replaces it.
const criConfName = "10-bench.conflist"

// criRig is containerd (one instance, for both contenders) whose CNI conf
// dir holds either the shim conflist of a thickRig's daemon or the
// daemon's delegate conflist itself.
type criRig struct {
	*thickRig
	delegate, shim []byte // the two conflists containerd is given in turn
	confDir        string // containerd's CNI conf dir
	cgroupParent   string
	config, log    string
	crictl         *cririg.Crictl
	containerd     *cririg.Containerd
	subnet         netip.Prefix
	daemonLog      *criLog
	unmount        []string // the tmpfs mounts, and mount points it created
	devices        []uint64 // the tmpfs mounts' devices
	created        []string
	seq            int
}

// criScenario: crictl runp+stopp+rmp of a pod with a hostPort, one
// containerd switching its CNI conf dir between the shim conflist and the
// delegate's, interleaved, on Debian's plugins.
func criScenario(r *report) error {
	rig, err := newCRIRig(r.opts.debianSet())
	if err != nil {
		return err
	}
	defer rig.close()
	res := &criResult{Set: rig.set}
	for _, shim := range []bool{true, false} { // warm-up, not measured
		if err := rig.use(shim); err != nil {
			return err
		}
		if _, _, _, _, err := rig.cycle(28800); err != nil {
			return err
		}
	}
	res.LoadBefore = loadAverage()
	for i := range r.opts.criN {
		for _, shim := range []bool{i%2 == 0, i%2 != 0} {
			if err := rig.use(shim); err != nil {
				return err
			}
			runp, stopp, rmp, logged, err := rig.cycle(28801 + i%50)
			if err != nil {
				return err
			}
			s := &res.Direct
			if shim {
				s = &res.Shim
				res.Daemon.Runp.add(logged[0])
				res.Daemon.Stopp.add(logged[1])
				res.Daemon.Rmp.add(logged[2])
			} else if n := logged[0].count + logged[1].count + logged[2].count; n > 0 {
				return fmt.Errorf("the cninet daemon served %d requests for a pod on the delegate conflist: containerd did not run the conflist it was given", n)
			}
			s.Runp, s.Stopp, s.Rmp = append(s.Runp, runp), append(s.Stopp, stopp), append(s.Rmp, rmp)
		}
	}
	res.LoadAfter = loadAverage()
	shim, direct := res.Shim.total(), res.Direct.total()
	fmt.Fprintf(os.Stderr, "bench:   shim %s (runp %s), direct %s (runp %s), ratio %.3f; load %.2f -> %.2f\n",
		ms(shim.median()), ms(res.Shim.Runp.median()), ms(direct.median()), ms(res.Direct.Runp.median()),
		ratio(shim.median(), direct.median()), res.LoadBefore[0], res.LoadAfter[0])
	r.res.CRI = res
	return nil
}

// newCRIRig starts a cninet daemon for a fresh bridge network of set (a
// thickRig), and containerd in this process's namespaces with its state
// in tmpfs, its runc the bench binary as a wrapper, and its sandbox
// image imported; its conf dir holds the shim conflist.
func newCRIRig(set pluginSet) (_ *criRig, err error) {
	for _, tool := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is not installed (apt-get install containerd runc busybox-static): %w", tool, err)
		}
	}
	crictl, err := filepath.Abs("../.cache/bin/crictl")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(crictl); err != nil {
		return nil, fmt.Errorf("crictl (run scripts/install-deps.sh): %w", err)
	}
	thick, err := prepareThickRig(set)
	if err != nil {
		return nil, err
	}
	rig := &criRig{thickRig: thick, cgroupParent: fmt.Sprintf("/cninet-bench-cri-%d", os.Getpid()), daemonLog: &criLog{}}
	defer func() {
		if err != nil {
			rig.close()
		}
	}()
	rig.debugLog = rig.daemonLog
	if err := rig.start(); err != nil {
		return nil, err
	}
	if rig.delegate, err = os.ReadFile(filepath.Join(rig.directNet, rig.name+".conflist")); err != nil {
		return nil, err
	}
	if rig.shim, err = os.ReadFile(filepath.Join(rig.shimNet, rig.name+".conflist")); err != nil {
		return nil, err
	}
	var delegate struct {
		Plugins []struct {
			IPAM struct{ Ranges [][]struct{ Subnet string } }
		}
	}
	if err := json.Unmarshal(rig.delegate, &delegate); err != nil {
		return nil, err
	}
	for _, p := range delegate.Plugins {
		if len(p.IPAM.Ranges) > 0 && len(p.IPAM.Ranges[0]) > 0 {
			rig.subnet, err = netip.ParsePrefix(p.IPAM.Ranges[0][0].Subnet)
		}
	}
	if err != nil || !rig.subnet.IsValid() {
		return nil, fmt.Errorf("the delegate conflist names no IPv4 subnet (%v): %s", err, rig.delegate)
	}
	for _, dir := range []string{cririg.Root, cririg.State} {
		if !exists(dir) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			rig.created = append(rig.created, dir)
		}
		// The bench runs in its own mount namespace with private mounts
		// (netsandbox.Run): the host never sees these.
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return nil, fmt.Errorf("mounting a tmpfs over %s: %w", dir, err)
		}
		rig.unmount = append(rig.unmount, dir)
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return nil, err
		}
		rig.devices = append(rig.devices, st.Dev)
	}
	tmp := filepath.Dir(rig.shimDir)
	// containerd's CNI bin dir: every plugin of the set, for the delegate
	// conflist, and the shim.
	binDir := filepath.Join(tmp, "cri-bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	plugins, err := os.ReadDir(set.Dir)
	if err != nil {
		return nil, err
	}
	for _, p := range plugins {
		if err := os.Symlink(filepath.Join(set.Dir, p.Name()), filepath.Join(binDir, p.Name())); err != nil {
			return nil, err
		}
	}
	if err := os.Symlink(filepath.Join(rig.shimDir, "cninet-shim"), filepath.Join(binDir, "cninet-shim")); err != nil {
		return nil, err
	}
	rig.confDir = filepath.Join(tmp, "cri-net.d")
	if err := os.MkdirAll(rig.confDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(rig.confDir, criConfName), rig.shim, 0o644); err != nil {
		return nil, err
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	wrapper := filepath.Join(tmp, "runc-wrapper")
	if err := cririg.WriteRuncWrapper(wrapper, self, runc, ""); err != nil {
		return nil, err
	}
	if rig.crictl, err = cririg.NewCrictl(crictl, filepath.Join(tmp, "crictl.yaml"), 3*time.Minute); err != nil {
		return nil, err
	}
	rig.config, rig.log = filepath.Join(tmp, "containerd.toml"), filepath.Join(tmp, "containerd.log")
	toml := cririg.Config{SandboxImage: criPauseImage, RuncBinary: wrapper, CNIBinDir: binDir, CNIConfDir: rig.confDir}.TOML()
	if err := os.WriteFile(rig.config, []byte(toml), 0o644); err != nil {
		return nil, err
	}
	if rig.containerd, err = cririg.StartContainerd(rig.config, rig.log); err != nil {
		return nil, err
	}
	if err := rig.waitFor("containerd's CRI plugin to report its network ready", rig.crictl.NetworkReady); err != nil {
		return nil, err
	}
	image := filepath.Join(tmp, "pause.tar")
	if err := cririg.WritePauseImage(image, criPauseImage); err != nil {
		return nil, err
	}
	if out, err := exec.Command("ctr", "--address", cririg.Socket, "-n", "k8s.io", "images", "import", "--snapshotter", "native", image).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ctr images import: %v: %s", err, out)
	}
	err = rig.waitFor("the CRI plugin to list "+criPauseImage, func() error {
		_, err := rig.crictl.Run("inspecti", criPauseImage)
		return err
	})
	return rig, err
}

// waitFor retries cond every 100ms for up to 30s, and fails with its last
// error and containerd's log when it never holds or containerd exits.
func (rig *criRig) waitFor(what string, cond func() error) error {
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		select {
		case exit := <-rig.containerd.Exited():
			rig.containerd = nil
			return fmt.Errorf("containerd exited while waiting for %s: %v\n%s", what, exit, rig.logTail())
		default:
		}
		if err = cond(); err == nil {
			return nil
		}
	}
	return fmt.Errorf("waiting for %s: %v\n%s", what, err, rig.logTail())
}

func (rig *criRig) logTail() string {
	b, _ := os.ReadFile(rig.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// mounted fails once containerd's root or state is no longer the tmpfs
// mounted for it. A mount point is a directory of the host's filesystem,
// and removing it there (another run's rig removing what it created, in
// its own mount namespace) detaches every namespace's mounts on it; this
// containerd would then write on the host. The run stops instead.
func (rig *criRig) mounted() error {
	for i, dir := range rig.unmount {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil || st.Dev != rig.devices[i] {
			return fmt.Errorf("containerd's %s is no longer the tmpfs mounted for it (%v): another process removed the mount point on the host while this ran; nothing measured after that is kept", dir, err)
		}
	}
	return nil
}

// use makes containerd network the next pods through the shim (or
// through the delegate directly), and returns once its CRI plugin has
// loaded that conflist.
//
// containerd 1.6's CRI plugin watches its conf dir (fsnotify) and reloads
// it on a write, rename or remove there, ignoring creates and chmods. The
// new conflist is written under a name libcni does not load (no .conflist
// extension) and renamed over the old one: the rename reloads, and the
// reload reads the whole new file. `crictl info` then shows the loaded
// plugin types, which are polled until they are the wanted ones; a
// reload that the staged file's write queued and that runs later reads
// the same file, and the short settle lets it pass outside the timing.
func (rig *criRig) use(shim bool) error {
	conf, want := rig.delegate, rig.delegateTypes()
	if shim {
		conf, want = rig.shim, "cninet-shim"
	}
	info, err := rig.crictl.Info()
	if err != nil {
		return err
	}
	if loaded := info.PluginTypes(); len(loaded) > 0 && loaded[len(loaded)-1] == want {
		return nil
	}
	staged := filepath.Join(rig.confDir, criConfName+".next")
	if err := os.WriteFile(staged, conf, 0o644); err != nil {
		return err
	}
	if err := os.Rename(staged, filepath.Join(rig.confDir, criConfName)); err != nil {
		return err
	}
	err = rig.waitFor("the CRI plugin to load the "+want+" conflist", func() error {
		info, err := rig.crictl.Info()
		if err != nil {
			return err
		}
		if loaded := info.PluginTypes(); len(loaded) == 0 || loaded[len(loaded)-1] != want {
			return fmt.Errorf("the CRI plugin has loaded %q", loaded)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	return err
}

// delegateTypes is the delegate conflist's plugin types as crictl info
// lists a loaded network's: joined by "+".
func (rig *criRig) delegateTypes() string {
	var list struct{ Plugins []struct{ Type string } }
	json.Unmarshal(rig.delegate, &list)
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Type)
	}
	return strings.Join(types, "+")
}

// cycle runs a pod whose container port 8080 is published on hostPort,
// checks that containerd reports it ready with an address in the
// delegate's subnet (untimed), then stops and removes it, as the kubelet
// does; it returns how long each of the three crictl commands took, and
// what the daemon logged during each.
func (rig *criRig) cycle(hostPort int) (runp, stopp, rmp time.Duration, logged [3]criLogged, err error) {
	if err := rig.mounted(); err != nil {
		return 0, 0, 0, logged, err
	}
	rig.seq++
	name := fmt.Sprintf("bench-cri-%d", rig.seq)
	config := filepath.Join(filepath.Dir(rig.shimDir), name+".json")
	pod := fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "cninet-bench", "uid": %q},
  "port_mappings": [{"protocol": 0, "container_port": 8080, "host_port": %d}],
  "linux": {"cgroup_parent": %q}
}`, name, name+"-uid", hostPort, rig.cgroupParent)
	if err := os.WriteFile(config, []byte(pod), 0o644); err != nil {
		return 0, 0, 0, logged, err
	}
	defer os.Remove(config)
	rig.daemonLog.take()
	start := time.Now()
	out, err := rig.crictl.Run("runp", config)
	runp = time.Since(start)
	if err != nil {
		return 0, 0, 0, logged, fmt.Errorf("%v\n%s", err, rig.logTail())
	}
	logged[0] = rig.daemonLog.take()
	id := strings.TrimSpace(out)
	if err := rig.checkPod(id); err != nil {
		return 0, 0, 0, logged, err
	}
	rig.daemonLog.take()
	start = time.Now()
	if _, err := rig.crictl.Run("stopp", id); err != nil {
		return 0, 0, 0, logged, err
	}
	stopp = time.Since(start)
	logged[1] = rig.daemonLog.take()
	start = time.Now()
	if _, err := rig.crictl.Run("rmp", id); err != nil {
		return 0, 0, 0, logged, err
	}
	rmp = time.Since(start)
	logged[2] = rig.daemonLog.take()
	return runp, stopp, rmp, logged, rig.mounted()
}

// checkPod wants the pod ready with an address in the delegate's subnet:
// the delegate's result reached containerd.
func (rig *criRig) checkPod(id string) error {
	out, err := rig.crictl.Run("inspectp", id)
	if err != nil {
		return err
	}
	var inspect struct {
		Status struct {
			State   string
			Network struct{ IP string }
		}
	}
	if err := json.Unmarshal([]byte(out), &inspect); err != nil {
		return fmt.Errorf("crictl inspectp %s: %w: %s", id, err, out)
	}
	addr, err := netip.ParseAddr(inspect.Status.Network.IP)
	if inspect.Status.State != "SANDBOX_READY" || err != nil || !rig.subnet.Contains(addr) {
		return fmt.Errorf("pod %s is %s with address %q, want SANDBOX_READY with one in %s", id, inspect.Status.State, inspect.Status.Network.IP, rig.subnet)
	}
	return nil
}

// close removes every pod still there, stops containerd, kills what
// outlived it, removes the pods' cgroups and the tmpfs mounts, and then
// the thickRig.
func (rig *criRig) close() {
	if rig.containerd != nil {
		if out, err := rig.crictl.Run("pods", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				rig.crictl.Run("stopp", id)
				rig.crictl.Run("rmp", "-f", id)
			}
		}
		if err := rig.containerd.Stop(20 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	if left := cririg.KillLeftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "bench: killed what outlived containerd: %s\n", strings.Join(left, "; "))
		time.Sleep(200 * time.Millisecond)
	}
	if err := cririg.RemoveCgroups(rig.cgroupParent); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	}
	for _, dir := range slices.Backward(rig.unmount) {
		unix.Unmount(dir, unix.MNT_DETACH)
	}
	for _, dir := range rig.created {
		os.Remove(dir)
	}
	rig.thickRig.close()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// criSection reports thick mode under containerd's CRI.
func (r *report) criSection(w writer) {
	w("## 11. Thick mode under containerd's CRI: crictl through the cninet-shim and the daemon\n\n")
	w("Debian's containerd (1.6) with its CRI plugin, driven by `crictl` (pinned by `scripts/install-deps.sh`) as a kubelet would, inside the bench's own network and mount namespaces (its state in tmpfs there, a sandbox image built from the host's static busybox, runc behind a wrapper that drops the cgroup limits and `oom_score_adj` those namespaces cannot grant: `internal/cririg`, shared with the integration tests). One `crictl runp` + `stopp` + `rmp` cycle of a pod whose container port 8080 is published on a hostPort, timed per command; between `runp` and `stopp`, untimed, `crictl inspectp` must show the pod ready with an address in the delegate's subnet.\n\n")
	w("Contenders: containerd's CNI conf dir holding the `cninet-shim` conflist, with a `cninet daemon` serving the delegate conflist (the default bridge: loopback, bridge, firewall, portmap; Debian's plugins), against the same containerd with that delegate conflist itself in its conf dir. One containerd serves both: its CRI plugin reloads the conf dir on a write, rename or remove there (fsnotify), so the bench renames the other conflist over the one file and polls `crictl info` until the loaded plugin types are the wanted ones (then 200 ms settle, untimed); a cycle of the delegate contender in which the daemon served a request fails the run. Interleaved, alternating which goes first (so one switch per pair), one unmeasured cycle each first. The daemon logs at debug level here, for its phases below.\n\n")
	w("%s", r.when("cri"))
	c := r.res.CRI
	if c == nil {
		w("(not measured)\n\n")
		return
	}
	shim, direct := c.Shim.total(), c.Direct.total()
	w("Command: `cd bench && go run . -plugins %s -upstream %s -only cri -cri-n %d` (as root).\n\n", c.Set.Dir, r.opts.upstreamDir, len(shim))
	q := ratio(shim.median(), direct.median())
	w("| plugin set | cycles | shim median | p95 | delegate directly median | p95 | ratio (median) | | paired ratio |\n|---|---|---|---|---|---|---|---|---|\n")
	w("| %s | %d | %s | %s | %s | %s | **%.3f×** | %s | %.3f× |\n\n", c.Set.Name, len(shim), ms(shim.median()), ms(shim.p95()),
		ms(direct.median()), ms(direct.p95()), q, callRatio(shim, direct, spread(direct, shim), criTarget).verdict(), pairedRatio(shim, direct))
	if pq := pairedRatio(shim, direct); (q <= criTarget) != (pq <= criTarget) {
		w("**The ratio of the medians (%.3f×) and the paired ratio (%.3f×) fall on different sides of the target: at this load, this run does not settle it.**\n\n", q, pq)
	}
	w("Target: ratio of the medians of runp+stopp+rmp ≤ %.2f×. Paired ratio: the median of shim/direct over the cycles run next to each other (not the target). Load average (1, 5, 15 min) when measuring began: %.2f %.2f %.2f; when it ended: %.2f %.2f %.2f, on %d cores.\n\n",
		criTarget, c.LoadBefore[0], c.LoadBefore[1], c.LoadBefore[2], c.LoadAfter[0], c.LoadAfter[1], c.LoadAfter[2], runtime.NumCPU())
	w("Where the time goes, per command (median / p95):\n\n| command | shim | delegate directly | shim − direct (medians) |\n|---|---|---|---|\n")
	for _, p := range []struct {
		name       string
		shim, dire sample
	}{{"`crictl runp` (CNI ADD inside)", c.Shim.Runp, c.Direct.Runp}, {"`crictl stopp` (CNI DEL inside)", c.Shim.Stopp, c.Direct.Stopp}, {"`crictl rmp` (a second DEL, which finds nothing)", c.Shim.Rmp, c.Direct.Rmp}} {
		w("| %s | %s / %s | %s / %s | %s |\n", p.name, ms(p.shim.median()), ms(p.shim.p95()), ms(p.dire.median()), ms(p.dire.p95()), signedMs(p.shim.median()-p.dire.median()))
	}
	d := c.Daemon
	if len(d.Runp.Requests) > 0 {
		var own time.Duration
		w("\nThe shim contender's commands as the daemon tells them (its debug log, medians over the cycles): the requests it served, their time from arrival to answer, and inside them cninet's phases — the delegate's plugins (the ADD chain, or its DEL), the prevention before a DEL and the force cleanup after it.\n\n")
		w("| command | requests | daemon's time | plugins | prevention | force cleanup | the rest of the daemon's time |\n|---|---|---|---|---|---|---|\n")
		for _, p := range []struct {
			name string
			s    criDaemonSample
		}{{"`crictl runp`", d.Runp}, {"`crictl stopp`", d.Stopp}, {"`crictl rmp`", d.Rmp}} {
			var rest sample
			for i := range p.s.Requests {
				rest = append(rest, p.s.Requests[i]-p.s.Plugins[i]-p.s.Prevent[i]-p.s.Cleanup[i])
			}
			counts := slices.Clone(p.s.Count)
			slices.Sort(counts)
			w("| %s | %d | %s | %s | %s | %s | %s |\n", p.name, counts[len(counts)/2], ms(p.s.Requests.median()), ms(p.s.Plugins.median()),
				msFine(p.s.Prevent.median()), msFine(p.s.Cleanup.median()), msFine(rest.median()))
			own += p.s.Prevent.median() + p.s.Cleanup.median() + rest.median()
		}
		diff := c.Shim.Runp.median() - c.Direct.Runp.median() + c.Shim.Stopp.median() - c.Direct.Stopp.median() + c.Shim.Rmp.median() - c.Direct.Rmp.median()
		w("\ncninet's own work in the daemon per cycle (the medians of prevention, force cleanup and the rest, summed): %s, %.1f%% of the delegate contender's median cycle. The commands' shim − direct medians sum to %s; what the daemon's own work does not explain is the shim's process and its request over the socket, three times a cycle (ADD, and DEL at `stopp` and again at `rmp`), and the machine's noise.\n",
			msFine(own), 100*float64(own)/float64(direct.median()), signedMs(diff))
	}
	w("\nThe shim's extra work per CNI command is one process exec and an HTTP request over the daemon's unix socket; the daemon runs the same plugins through cninet (prevention before DEL, force cleanup after it). Everything else in a cycle — containerd's snapshot, runc's create, start, kill and delete of the pause container, the pod's network namespace — is the same work for both contenders")
	if t := r.res.Thick; t != nil {
		w("; for scale, the CNI part alone (section 8: cnitool ADD+DEL of the same delegate, %d cycles) took %s through the shim and %s directly, a difference of %s", len(t.Shim), ms(t.Shim.median()), ms(t.Direct.median()), signedMs(t.Shim.median()-t.Direct.median()))
	}
	w(". On a loaded two-core machine the per-command medians of a few cycles move by more than that difference from run to run; the target is on the medians of whole cycles.\n\n")
}
