package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/seed1280861d/cninet/internal/cririg"
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
	crictl       *cririg.Crictl
	config, log  string
	cgroupParent string
	refuseMarker string // while it exists, the runc wrapper fails every create
	containerd   *cririg.Containerd
}

// pauseImage is the rig's sandbox image, built from the host's busybox.
const pauseImage = "localhost/cninet-pause:test"

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
	r := &criRig{thickRig: newThickRig(t, set, "1.0.0", false),
		cgroupParent: fmt.Sprintf("/cninet-cri-test-%d", os.Getpid())}
	privateTmpfs(t, cririg.Root, cririg.State)
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
	if err := cririg.WriteRuncWrapper(wrapper, self, runc, r.refuseMarker); err != nil {
		t.Fatal(err)
	}
	r.config, r.log = filepath.Join(tmp, "containerd.toml"), filepath.Join(tmp, "containerd.log")
	if r.crictl, err = cririg.NewCrictl(crictl, filepath.Join(tmp, "crictl.yaml"), runtimeWait); err != nil {
		t.Fatal(err)
	}
	writeFile(t, r.config, cririg.Config{SandboxImage: pauseImage, RuncBinary: wrapper, CNIBinDir: binDir, CNIConfDir: r.netDir}.TOML())
	t.Cleanup(r.cleanup)
	r.startContainerd()
	image := filepath.Join(tmp, "pause.tar")
	if err := cririg.WritePauseImage(image, pauseImage); err != nil {
		t.Fatal(err)
	}
	r.run("ctr", "--address", cririg.Socket, "-n", "k8s.io", "images", "import", "--snapshotter", "native", image)
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
	c, err := cririg.StartContainerd(r.config, r.log)
	if err != nil {
		r.t.Fatal(err)
	}
	r.containerd = c
	r.waitFor("containerd's CRI plugin to report its network ready", func() error {
		select {
		case err := <-c.Exited():
			r.containerd = nil
			r.t.Fatalf("containerd exited at start: %v\n%s", err, r.logTail())
		default:
		}
		return r.crictl.NetworkReady()
	})
}

// killContainerd SIGKILLs containerd; its shims, and so the pods, live on.
func (r *criRig) killContainerd() {
	r.t.Helper()
	r.containerd.Kill()
	r.containerd = nil
}

// stopContainerd sends SIGTERM and waits for containerd to exit.
func (r *criRig) stopContainerd() {
	if r.containerd == nil {
		return
	}
	if err := r.containerd.Stop(20 * time.Second); err != nil {
		r.t.Error(err)
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
	if left := cririg.KillLeftovers(); len(left) > 0 {
		if !r.t.Failed() {
			r.t.Errorf("pods' processes outlived their removal: %s", strings.Join(left, "; "))
		} else {
			r.t.Logf("killed what the failed test left running: %s", strings.Join(left, "; "))
		}
		time.Sleep(200 * time.Millisecond) // their cgroups empty once they are reaped
	}
	removeCgroups(r.t, r.cgroupParent)
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
func (r *criRig) tryCrictl(args ...string) (string, error) { return r.crictl.Run(args...) }

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
