package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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
	LoadBefore   [3]float64 // load averages when the scenario started measuring
	LoadAfter    [3]float64 // and when it finished
}

// criSample is one contender's cycles, each phase timed alone.
type criSample struct {
	Runp, Stopp, Rmp sample
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
const criTarget = 1.03

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
	unmount        []string // the tmpfs mounts, and mount points it created
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
		if _, _, _, err := rig.cycle(28800); err != nil {
			return err
		}
	}
	res.LoadBefore = loadAverage()
	for i := range r.opts.criN {
		for _, shim := range []bool{i%2 == 0, i%2 != 0} {
			if err := rig.use(shim); err != nil {
				return err
			}
			runp, stopp, rmp, err := rig.cycle(28801 + i%50)
			if err != nil {
				return err
			}
			s := &res.Direct
			if shim {
				s = &res.Shim
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
	thick, err := newThickRig(set)
	if err != nil {
		return nil, err
	}
	rig := &criRig{thickRig: thick, cgroupParent: fmt.Sprintf("/cninet-bench-cri-%d", os.Getpid())}
	defer func() {
		if err != nil {
			rig.close()
		}
	}()
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
// does; it returns how long each of the three crictl commands took.
func (rig *criRig) cycle(hostPort int) (runp, stopp, rmp time.Duration, err error) {
	rig.seq++
	name := fmt.Sprintf("bench-cri-%d", rig.seq)
	config := filepath.Join(filepath.Dir(rig.shimDir), name+".json")
	pod := fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "cninet-bench", "uid": %q},
  "port_mappings": [{"protocol": 0, "container_port": 8080, "host_port": %d}],
  "linux": {"cgroup_parent": %q}
}`, name, name+"-uid", hostPort, rig.cgroupParent)
	if err := os.WriteFile(config, []byte(pod), 0o644); err != nil {
		return 0, 0, 0, err
	}
	defer os.Remove(config)
	start := time.Now()
	out, err := rig.crictl.Run("runp", config)
	runp = time.Since(start)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("%v\n%s", err, rig.logTail())
	}
	id := strings.TrimSpace(out)
	if err := rig.checkPod(id); err != nil {
		return 0, 0, 0, err
	}
	start = time.Now()
	if _, err := rig.crictl.Run("stopp", id); err != nil {
		return 0, 0, 0, err
	}
	stopp = time.Since(start)
	start = time.Now()
	if _, err := rig.crictl.Run("rmp", id); err != nil {
		return 0, 0, 0, err
	}
	return runp, stopp, time.Since(start), nil
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
	w("Contenders: containerd's CNI conf dir holding the `cninet-shim` conflist, with a `cninet daemon` serving the delegate conflist (the default bridge: loopback, bridge, firewall, portmap; Debian's plugins), against the same containerd with that delegate conflist itself in its conf dir. One containerd serves both: its CRI plugin reloads the conf dir on a write, rename or remove there (fsnotify), so the bench renames the other conflist over the one file and polls `crictl info` until the loaded plugin types are the wanted ones (then 200 ms settle, untimed). Interleaved, alternating which goes first (so one switch per pair), one unmeasured cycle each first.\n\n")
	w("Command: `cd bench && go run . -plugins %s -upstream %s -only cri -cri-n N` (as root).\n\n", r.opts.pluginDir, r.opts.upstreamDir)
	w("%s", r.when("cri"))
	c := r.res.CRI
	if c == nil {
		w("(not measured)\n\n")
		return
	}
	shim, direct := c.Shim.total(), c.Direct.total()
	q := ratio(shim.median(), direct.median())
	w("| plugin set | cycles | shim median | p95 | delegate directly median | p95 | ratio (median) | | paired ratio |\n|---|---|---|---|---|---|---|---|---|\n")
	w("| %s | %d | %s | %s | %s | %s | **%.3f×** | %s | %.3f× |\n\n", c.Set.Name, len(shim), ms(shim.median()), ms(shim.p95()),
		ms(direct.median()), ms(direct.p95()), q, verdict(q <= criTarget), pairedRatio(shim, direct))
	w("Target: ratio of the medians of runp+stopp+rmp ≤ %.2f×. Paired ratio: the median of shim/direct over the cycles run next to each other (not the target). Load average (1, 5, 15 min) when measuring began: %.2f %.2f %.2f; when it ended: %.2f %.2f %.2f, on %d cores.\n\n",
		criTarget, c.LoadBefore[0], c.LoadBefore[1], c.LoadBefore[2], c.LoadAfter[0], c.LoadAfter[1], c.LoadAfter[2], runtime.NumCPU())
	w("Where the time goes, per command (median / p95):\n\n| command | shim | delegate directly | shim − direct (medians) |\n|---|---|---|---|\n")
	for _, p := range []struct {
		name       string
		shim, dire sample
	}{{"`crictl runp` (CNI ADD inside)", c.Shim.Runp, c.Direct.Runp}, {"`crictl stopp` (CNI DEL inside)", c.Shim.Stopp, c.Direct.Stopp}, {"`crictl rmp` (a second DEL, which finds nothing)", c.Shim.Rmp, c.Direct.Rmp}} {
		w("| %s | %s / %s | %s / %s | %s |\n", p.name, ms(p.shim.median()), ms(p.shim.p95()), ms(p.dire.median()), ms(p.dire.p95()), signedMs(p.shim.median()-p.dire.median()))
	}
	w("\nThe shim's extra work per CNI command is one process exec and an HTTP request over the daemon's unix socket; the daemon runs the same plugins through cninet (prevention before DEL, force cleanup after it). Everything else in a cycle — containerd's snapshot, runc's create, start, kill and delete of the pause container, the pod's network namespace — is the same work for both contenders")
	if t := r.res.Thick; t != nil {
		w("; for scale, the CNI part alone (section 8: cnitool ADD+DEL of the same delegate, %d cycles) took %s through the shim and %s directly, a difference of %s", len(t.Shim), ms(t.Shim.median()), ms(t.Direct.median()), signedMs(t.Shim.median()-t.Direct.median()))
	}
	w(". On a loaded two-core machine the per-command medians of a few cycles move by more than that difference from run to run; the target is on the medians of whole cycles.\n\n")
}
