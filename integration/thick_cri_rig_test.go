package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// criRig is Debian's containerd (1.6) with its CRI plugin, running in the
// test's network and mount namespaces, whose CNI conf dir holds the shim
// conflist of a thickRig's daemon, and crictl driving it as a kubelet
// would. Its state lives in tmpfs mounts of the test's mount namespace;
// its sandbox image is a local busybox that sleeps, imported from a
// tarball (no registry); its runc is the runc wrapper below.
type criRig struct {
	*thickRig
	crictl, crictlConfig string
	config, log          string
	cgroupParent         string
	refuseMarker         string // while it exists, the runc wrapper fails every create
	containerd           *exec.Cmd
	containerdExited     chan error
}

// Fixed by containerd 1.6: its shims' sockets are under /run/containerd
// whatever the configured state dir, so the whole of it is the test's
// tmpfs, and so is its root. The pods' network namespaces are mounted
// under /var/run/netns, which the suite's sandbox covers already.
const (
	containerdRoot   = "/var/lib/containerd"
	containerdState  = "/run/containerd"
	containerdSocket = containerdState + "/containerd.sock"
	pauseImage       = "localhost/cninet-pause:test"
)

// newCRIRig starts a cninet daemon for a fresh bridge network of set, and
// containerd whose CRI plugin networks pods through the shim; the shim
// conflist is 1.0.0, the newest CNI version containerd 1.6's libcni
// speaks.
func newCRIRig(t *testing.T, set netsandbox.PluginSet) *criRig {
	t.Helper()
	for _, tool := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			netsandbox.Unavailable(t, tool+" is not installed (apt-get install containerd runc busybox-static): "+err.Error())
		}
	}
	crictl := filepath.Join(netsandbox.RepoRoot(t), ".cache", "bin", "crictl")
	if _, err := os.Stat(crictl); err != nil {
		netsandbox.Unavailable(t, "crictl is not installed (run scripts/install-deps.sh): "+err.Error())
	}
	r := &criRig{thickRig: newThickRig(t, set, "1.0.0", false), crictl: crictl,
		cgroupParent: fmt.Sprintf("/cninet-cri-test-%d", os.Getpid())}
	privateTmpfs(t, containerdRoot, containerdState)
	tmp := t.TempDir()
	// containerd's CNI bin dir: the shim, and the loopback plugin its CRI
	// runs for every pod's lo.
	binDir := filepath.Join(tmp, "cni-bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"cninet-shim": filepath.Join(r.shimDir, "cninet-shim"),
		"loopback":    filepath.Join(set.Dir, "loopback"),
	} {
		if err := os.Symlink(target, filepath.Join(binDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(tmp, "runc-wrapper")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r.refuseMarker = filepath.Join(tmp, "refuse-create")
	script := fmt.Sprintf("#!/bin/sh\n%s='%s' %s='%s' exec '%s' \"$@\"\n", runcWrapperEnv, runc, runcRefuseEnv, r.refuseMarker, self)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r.config, r.log = filepath.Join(tmp, "containerd.toml"), filepath.Join(tmp, "containerd.log")
	// crictl's own config, so that it reads none of the host's.
	r.crictlConfig = filepath.Join(tmp, "crictl.yaml")
	writeFile(t, r.crictlConfig, fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", containerdSocket, containerdSocket))
	writeFile(t, r.config, fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.overlayfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
`, containerdRoot, containerdState, containerdSocket, pauseImage, wrapper, binDir, r.netDir))
	t.Cleanup(r.cleanup)
	r.startContainerd()
	image := filepath.Join(tmp, "pause.tar")
	writePauseImage(t, image, pauseImage)
	r.run("ctr", "--address", containerdSocket, "-n", "k8s.io", "images", "import", "--snapshotter", "native", image)
	r.waitFor("the CRI plugin to list "+pauseImage, func() error {
		_, err := r.tryCrictl("inspecti", pauseImage)
		return err
	})
	return r
}

// startContainerd starts containerd on the rig's config and waits until
// its CRI plugin answers and reports the network ready (it has loaded the
// shim conflist).
func (r *criRig) startContainerd() {
	r.t.Helper()
	log, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer log.Close()
	r.containerd = exec.Command("containerd", "--config", r.config, "--log-level", "warn")
	r.containerd.Stdout, r.containerd.Stderr = log, log
	if err := r.containerd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.containerdExited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan error) { exited <- cmd.Wait() }(r.containerd, r.containerdExited)
	r.waitFor("containerd's CRI plugin to report its network ready", func() error {
		select {
		case err := <-r.containerdExited:
			r.containerd = nil
			r.t.Fatalf("containerd exited at start: %v\n%s", err, r.logTail())
		default:
		}
		out, err := r.tryCrictl("info")
		if err != nil {
			return err
		}
		var info struct {
			Status struct {
				Conditions []struct {
					Type   string
					Status bool
				}
			}
		}
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			return err
		}
		for _, c := range info.Status.Conditions {
			if c.Type == "NetworkReady" && c.Status {
				return nil
			}
		}
		return fmt.Errorf("NetworkReady is not true: %s", out)
	})
}

// killContainerd SIGKILLs containerd; its shims, and so the pods, live on.
func (r *criRig) killContainerd() {
	r.t.Helper()
	r.containerd.Process.Kill()
	<-r.containerdExited
	r.containerd = nil
}

// stopContainerd sends SIGTERM and waits for containerd to exit.
func (r *criRig) stopContainerd() {
	if r.containerd == nil {
		return
	}
	r.containerd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.containerdExited:
	case <-time.After(20 * time.Second):
		r.containerd.Process.Kill()
		<-r.containerdExited
		r.t.Error("containerd did not exit within 20s of SIGTERM")
	}
	r.containerd = nil
}

// cleanup removes the pods a failed test left (their DEL goes through the
// shim like any other), stops containerd, kills the shims and pod
// processes still running (they outlive containerd by design), and
// removes the pods' cgroups. It runs before the rig's daemon stops and
// the tmpfs mounts go.
func (r *criRig) cleanup() {
	if r.t.Failed() {
		r.t.Logf("containerd's log ends:\n%s", r.logTail())
	}
	if r.containerd != nil {
		if out, err := r.tryCrictl("pods", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				r.tryCrictl("stopp", id)
				r.tryCrictl("rmp", "-f", id)
			}
		}
	}
	r.stopContainerd()
	if left := r.killLeftovers(); len(left) > 0 {
		if !r.t.Failed() {
			r.t.Errorf("pods' processes outlived their removal: %s", strings.Join(left, "; "))
		} else {
			r.t.Logf("killed what the failed test left running: %s", strings.Join(left, "; "))
		}
		time.Sleep(200 * time.Millisecond) // their cgroups empty once they are reaped
	}
	removeCgroups(r.t, r.cgroupParent)
}

// killLeftovers SIGKILLs every pod process (the init.pid of a task's
// bundle, in the task's cgroup) and every containerd shim still running for a task of this
// rig's containerd: a shim is told by its task id and by running in this
// test's mount namespace, where the bundles are. It returns what it
// killed.
func (r *criRig) killLeftovers() []string {
	bundles, _ := filepath.Glob(filepath.Join(containerdState, "io.containerd.runtime.v2.task", "*", "*"))
	if len(bundles) == 0 {
		return nil
	}
	var killed []string
	kill := func(pid int, what string) {
		if pid > 1 && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, fmt.Sprintf("%s (pid %d)", what, pid))
		}
	}
	ids := map[string]bool{}
	for _, bundle := range bundles {
		ids[filepath.Base(bundle)] = true
		b, err := os.ReadFile(filepath.Join(bundle, "init.pid"))
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		// Only while the pid is still the task's: its cgroup is named
		// after the task id.
		if cgroups, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && strings.Contains(string(cgroups), filepath.Base(bundle)) {
			kill(pid, "task "+filepath.Base(bundle))
		}
	}
	ownMounts, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return killed
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		if mounts, err := os.Readlink(proc + "/ns/mnt"); err != nil || mounts != ownMounts {
			continue
		}
		cmdline, _ := os.ReadFile(proc + "/cmdline")
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-id" && ids[args[i+1]] {
				pid, _ := strconv.Atoi(filepath.Base(proc))
				kill(pid, "shim of "+args[i+1])
			}
		}
	}
	return killed
}

func (r *criRig) logTail() string {
	b, _ := os.ReadFile(r.log)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// waitFor retries cond every 100ms for up to 30s and fails the test with
// its last error when it never holds.
func (r *criRig) waitFor(what string, cond func() error) {
	r.t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = cond(); err == nil {
			return
		}
	}
	r.t.Fatalf("waiting for %s: %v\n%s", what, err, r.logTail())
}

// tryCrictl runs crictl against the rig's containerd; the error carries
// crictl's stderr.
func (r *criRig) tryCrictl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runtimeWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.crictl, append([]string{"--config", r.crictlConfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("crictl %s: %v: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// crictl is tryCrictl failing the test on error.
func (r *criRig) crictlOK(args ...string) string {
	r.t.Helper()
	out, err := r.tryCrictl(args...)
	if err != nil {
		r.t.Fatalf("%v\n%s", err, r.logTail())
	}
	return out
}

func (r *criRig) run(name string, args ...string) {
	r.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		r.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// criPod is a pod sandbox the rig ran.
type criPod struct {
	ID, IP, NetNS string
}

// runPod runs a pod sandbox named name whose port containerPort is
// mapped to hostPort over TCP, and returns its id, address and network
// namespace as containerd reports them.
func (r *criRig) runPod(name string, hostPort, containerPort int) criPod {
	r.t.Helper()
	id := strings.TrimSpace(r.crictlOK("runp", r.podConfig(name, hostPort, containerPort)))
	var inspect struct {
		Status struct {
			State   string
			Network struct{ IP string }
		}
		Info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string }
				}
			}
		}
	}
	out := r.crictlOK("inspectp", id)
	if err := json.Unmarshal([]byte(out), &inspect); err != nil {
		r.t.Fatalf("crictl inspectp %s: %v: %s", id, err, out)
	}
	pod := criPod{ID: id, IP: inspect.Status.Network.IP}
	for _, n := range inspect.Info.RuntimeSpec.Linux.Namespaces {
		if n.Type == "network" {
			pod.NetNS = n.Path
		}
	}
	if inspect.Status.State != "SANDBOX_READY" || pod.IP == "" || pod.NetNS == "" {
		r.t.Fatalf("pod %s is %s with address %q and netns %q, want ready with both: %s", name, inspect.Status.State, pod.IP, pod.NetNS, out)
	}
	return pod
}

// podConfig writes crictl's pod sandbox config for runPod and returns its
// path: the pod's cgroups go under the rig's cgroup parent.
func (r *criRig) podConfig(name string, hostPort, containerPort int) string {
	r.t.Helper()
	config := filepath.Join(r.t.TempDir(), name+".json")
	writeFile(r.t, config, fmt.Sprintf(`{
  "metadata": {"name": %q, "namespace": "cninet-test", "uid": %q},
  "port_mappings": [{"protocol": 0, "container_port": %d, "host_port": %d}],
  "linux": {"cgroup_parent": %q}
}`, name, name+"-uid", containerPort, hostPort, r.cgroupParent))
	return config
}

// removePod stops and removes a pod, as the kubelet does.
func (r *criRig) removePod(pod criPod) {
	r.t.Helper()
	r.crictlOK("stopp", pod.ID)
	r.crictlOK("rmp", pod.ID)
}

// serveInPod answers "hello from <name>" on port inside the pod's network
// namespace, listening from the test process; stop closes the listener
// (it holds the namespace) before the pod is stopped.
func serveInPod(t *testing.T, pod criPod, port int, name string) (stop func()) {
	t.Helper()
	netns, err := ns.GetNS(pod.NetNS)
	if err != nil {
		t.Fatalf("opening pod %s's network namespace: %v", pod.ID, err)
	}
	t.Cleanup(func() { netns.Close() })
	return serveHTTP(t, &netsandbox.Workload{NS: netns, Path: pod.NetNS}, port, name)
}

// runcWrapperEnv names the runc the test binary runs as containerd's runc
// wrapper (see runRuncWrapperIfAsked); runcRefuseEnv names a file whose
// existence makes the wrapper fail every container create.
const (
	runcWrapperEnv = "CNINET_TEST_RUNC_WRAPPER"
	runcRefuseEnv  = "CNINET_TEST_RUNC_REFUSE"
)

// refuseCreates makes the runc wrapper fail (or again run) every
// container create: a pod whose sandbox then fails to start has had its
// network set up already, and containerd undoes it.
func (r *criRig) refuseCreates(refuse bool) {
	r.t.Helper()
	if !refuse {
		if err := os.Remove(r.refuseMarker); err != nil {
			r.t.Fatal(err)
		}
		return
	}
	writeFile(r.t, r.refuseMarker, "")
}

// runRuncWrapperIfAsked makes the test binary, run by the rig's wrapper
// script in place of runc, a runc that drops from the bundle's
// config.json what the test's namespaces cannot grant — cgroup limits
// (no controller is delegated to them) and a lowered oom_score_adj
// (containerd asks -998 for a pod sandbox) — and then runs the real runc
// with the same arguments. Neither is networking, which is what the tests
// exercise.
func runRuncWrapperIfAsked() {
	runc := os.Getenv(runcWrapperEnv)
	if runc == "" {
		return
	}
	if marker := os.Getenv(runcRefuseEnv); marker != "" && bundleOf(os.Args[1:]) != "" && exists(marker) {
		fmt.Fprintln(os.Stderr, "runc wrapper: refusing to create a container, as the test asked")
		os.Exit(1)
	}
	if err := dropUnsupportedLimits(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "runc wrapper:", err)
		os.Exit(1)
	}
	err := syscall.Exec(runc, append([]string{"runc"}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "runc wrapper: running runc:", err)
	os.Exit(1)
}

// dropUnsupportedLimits edits the config.json of the bundle that args
// name (bundleOf); other commands have none and are left alone.
func dropUnsupportedLimits(args []string) error {
	bundle := bundleOf(args)
	if bundle == "" {
		return nil
	}
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // ids and limits stay exact
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if linux, ok := spec["linux"].(map[string]any); ok {
		delete(linux, "resources")
	}
	if process, ok := spec["process"].(map[string]any); ok {
		delete(process, "oomScoreAdj")
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// bundleOf is the bundle directory runc's args name (--bundle or -b, as
// `runc create` and `runc run` take it), or "".
func bundleOf(args []string) string {
	bundle := ""
	for i, a := range args {
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			bundle = args[i+1]
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		}
	}
	return bundle
}

// writePauseImage writes a docker-archive image tarball (what `docker
// save` writes and `ctr images import` reads) tagged ref: one layer, the
// host's static busybox, whose entrypoint sleeps forever, as a pod
// sandbox's pause process does.
func writePauseImage(t *testing.T, path, ref string) {
	t.Helper()
	layerPath := path + ".layer"
	writeBusyboxImage(t, layerPath)
	defer os.Remove(layerPath)
	layer, err := os.ReadFile(layerPath)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/bin/busybox", "sleep", "2147483647"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, file := range []struct {
		name string
		data []byte
	}{{"layer.tar", layer}, {"config.json", config}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Name: file.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(file.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, bytes.NewReader(file.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// podState is the pod's state as containerd reports it.
func (r *criRig) podState(id string) string {
	r.t.Helper()
	var inspect struct{ Status struct{ State string } }
	out := r.crictlOK("inspectp", id)
	if err := json.Unmarshal([]byte(out), &inspect); err != nil {
		r.t.Fatalf("crictl inspectp %s: %v: %s", id, err, out)
	}
	return inspect.Status.State
}
