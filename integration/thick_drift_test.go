package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// withDaemonArgs puts args on the daemon's command line.
func withDaemonArgs(args ...string) rigOption {
	return func(r *thickRig) { r.extraArgs = append(r.extraArgs, args...) }
}

// checkPasses runs `cnitool check` until it passes, for at most
// watcherWait, and returns how long that took.
func (r *thickRig) checkPasses(netns, when string) time.Duration {
	r.t.Helper()
	start := time.Now()
	for {
		out, errOut, err := r.cnitool(nil, "check", r.name(), netns)
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > watcherWait {
			r.t.Fatalf("%s: cnitool check still fails %s later: %v\nstdout: %s\nstderr: %s", when, watcherWait, err, out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Thick mode on Debian's plugins (whose portmap CHECK fails on healthy
// attachments): `cnitool check` through the shim passes on a healthy
// attachment. After `iptables -t nat -F`, with the daemon's repair
// watcher off, it fails naming what is missing. The daemon restarted
// with a repair watcher makes the attachment whole by itself (its first
// pass), and after another flush again, on the nf_tables notification
// alone (its interval is an hour): a later `cnitool check` passes and
// the port answers. DEL then leaves nothing.
func TestThickCheckSeesADriftThroughTheShimAndTheDaemonRepairsIt(t *testing.T) {
	set := pluginSetNamed(t, "debian-1.1.1")
	r := newThickRig(t, set, "1.1.0", false, withDaemonArgs("--repair-every", "0"))
	base := baseline(t)
	w := netsandbox.NewWorkload(t)
	stop := serveHTTP(t, w, 8080, "thick-drift")
	port := hostPort(r.name(), 0)
	r.mustCnitool(portArgs(port, 8080), "add", r.name(), w.Path)
	assertReachable(t, "after ADD", port, "thick-drift", r.nw.gw4)
	r.mustCnitool(nil, "check", r.name(), w.Path)

	run(t, "iptables", "-t", "nat", "-F")
	out, errOut, err := r.cnitool(nil, "check", r.name(), w.Path)
	if err == nil || !strings.Contains(errOut+out, "missing") || !strings.Contains(errOut+out, "CNI-HOSTPORT-DNAT") {
		t.Fatalf("cnitool check after iptables -t nat -F: %v, want a failure naming what is missing (CNI-HOSTPORT-DNAT's jump)\nstdout: %s\nstderr: %s",
			err, out, errOut)
	}
	t.Logf("cnitool check after the flush: %s", strings.TrimSpace(errOut+out))

	r.stop()
	r.extraArgs = []string{"--repair-every", "1h"}
	r.start()
	took := r.checkPasses(w.Path, "after the daemon restarted with a repair watcher")
	assertReachable(t, "after the daemon's first pass", port, "thick-drift", r.nw.gw4)
	t.Logf("whole %s after the daemon restarted", took.Round(time.Millisecond))

	run(t, "iptables", "-t", "nat", "-F")
	took = r.checkPasses(w.Path, "after another flush")
	assertReachable(t, "after the daemon's repair on the flush's notification", port, "thick-drift", r.nw.gw4)
	t.Logf("whole %s after the second flush", took.Round(time.Millisecond))

	r.mustCnitool(portArgs(port, 8080), "del", r.name(), w.Path)
	stop()
	assertNoLeaks(t, base, r.nw.allowance())
}
