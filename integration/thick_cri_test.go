package integration

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// Each containerd test runs once per plugin set (eachPluginSet: Debian's
// 1.1.1, upstream v1.9.1 with iptables and with nftables): every story
// ends in DELs of the delegate, portmap's included, whose plugins decide
// whether they leave anything.

// containerd's CRI plugin (Debian's containerd 1.6, driven by crictl as a
// kubelet would) runs a pod sandbox on a shim network: the pod's address
// is the delegate's, its hostPort answers from the host side through the
// cninet daemon's delegate, and `crictl stopp` + `rmp` leave no rule,
// reservation, cache file, registry record or veth.
func TestThickContainerdPod(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newCRIRig(t, set)
		base := baseline(t)
		pod := r.runPod("cri-web", 28701, 8080)
		assertPodInSubnet(t, r, pod)
		stop := serveInPod(t, pod, 8080, "cri-web")
		if body, err := fetch(r.nw.gw4, 28701); err != nil || body != "hello from cri-web" {
			t.Fatalf("the pod's hostPort 28701 from the host side: %q, %v", body, err)
		}
		stop()
		r.removePod(pod)
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// A pod sandbox whose pause container fails to start (runc refuses it)
// after its network was set up: `crictl runp` fails, and containerd's own
// DEL of the half-made pod, through the shim, leaves nothing. The next
// pod on the same network starts and answers.
func TestThickContainerdPodStartFails(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newCRIRig(t, set)
		base := baseline(t)
		r.refuseCreates(true)
		if out, err := r.tryCrictl("runp", r.podConfig("cri-refused", 28731, 8080)); err == nil {
			t.Fatalf("crictl runp succeeded with runc refusing to create the sandbox: %s", out)
		} else if !strings.Contains(err.Error(), "OCI runtime create failed") {
			t.Fatalf("crictl runp failed, but not for runc's refusal: %v", err)
		}
		if out := strings.TrimSpace(r.crictlOK("pods", "-q")); out != "" {
			t.Fatalf("containerd lists pods after the failed runp: %s", out)
		}
		assertNoLeaks(t, base, r.nw.allowance())

		r.refuseCreates(false)
		pod := r.runPod("cri-next", 28731, 8080)
		stop := serveInPod(t, pod, 8080, "cri-next")
		if body, err := fetch(r.nw.gw4, 28731); err != nil || body != "hello from cri-next" {
			t.Fatalf("the next pod's hostPort 28731: %q, %v", body, err)
		}
		stop()
		r.removePod(pod)
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// containerd is SIGKILLed and started again while two pods live: both
// keep answering on their hostPorts, the restarted containerd knows them
// (their sandboxes and netns), and their stopp + rmp, whose DEL comes
// from a containerd that did not run their ADD, leave nothing.
func TestThickContainerdRestart(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newCRIRig(t, set)
		base := baseline(t)
		pods := []criPod{r.runPod("cri-a", 28711, 8080), r.runPod("cri-b", 28712, 8080)}
		stops := []func(){serveInPod(t, pods[0], 8080, "cri-a"), serveInPod(t, pods[1], 8080, "cri-b")}
		r.killContainerd()
		r.startContainerd()
		for i, name := range []string{"cri-a", "cri-b"} {
			if body, err := fetch(r.nw.gw4, 28711+i); err != nil || body != "hello from "+name {
				t.Fatalf("pod %s's hostPort %d after containerd restarted: %q, %v", name, 28711+i, body, err)
			}
			if state := r.podState(pods[i].ID); state != "SANDBOX_READY" {
				t.Fatalf("the restarted containerd reports pod %s %s, want SANDBOX_READY", name, state)
			}
		}
		for i := range pods {
			stops[i]()
			r.removePod(pods[i])
		}
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// The cninet daemon is SIGKILLed while a pod is live: a new pod's runp
// fails naming the daemon's socket (the shim's ADD is "try again later"),
// containerd's DEL at `crictl stopp` still succeeds, the shim running it
// itself (the daemon gives no answer: see docs/thick-mode.md), and
// nothing is left of either pod. A daemon started again then serves the
// next pod.
func TestThickContainerdDaemonKilled(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newCRIRig(t, set)
		base := baseline(t)
		pod := r.runPod("cri-orphan", 28721, 8080)
		stop := serveInPod(t, pod, 8080, "cri-orphan")
		if body, err := fetch(r.nw.gw4, 28721); err != nil || body != "hello from cri-orphan" {
			t.Fatalf("the pod's hostPort 28721 from the host side: %q, %v", body, err)
		}
		r.kill()
		start := time.Now()
		out, err := r.tryCrictl("runp", r.podConfig("cri-while-down", 28723, 8080))
		t.Logf("crictl runp with the daemon down returned after %s", time.Since(start).Round(time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), r.socket) {
			t.Fatalf("crictl runp with the daemon down: %v (%s), want a failure naming the socket %s", err, out, r.socket)
		}
		stop()
		r.removePod(pod)
		if out := strings.TrimSpace(r.crictlOK("pods", "-q")); out != "" {
			t.Fatalf("containerd lists pods after the failed runp and the orphan's rmp: %s", out)
		}
		assertNoLeaks(t, base, r.nw.allowance())

		r.start()
		pod = r.runPod("cri-after", 28722, 8080)
		assertPodInSubnet(t, r, pod)
		r.removePod(pod)
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// assertPodInSubnet wants the address containerd reports for pod in the
// delegate's subnet: the delegate's result reached containerd.
func assertPodInSubnet(t *testing.T, r *criRig, pod criPod) {
	t.Helper()
	addr, err := netip.ParseAddr(pod.IP)
	if err != nil || !netip.MustParsePrefix(r.nw.cfg.IPv4Subnet).Contains(addr) {
		t.Fatalf("pod %s has address %q, want one in the delegate's subnet %s (%v)", pod.ID, pod.IP, r.nw.cfg.IPv4Subnet, err)
	}
}
