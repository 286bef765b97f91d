package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestGCRemovesTheDeadAndLeavesTheLiveReachable(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		live := netsandbox.NewWorkload(t)
		liveAlloc := &cninet.Allocation{ID: "live-1", Ports: []cninet.Port{{Value: 28085, To: 8080}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), liveAlloc, live.Path); err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, live, 8080, "live-1")
		// Three ways a runner loses workloads: the namespace deleted, the
		// libcni cache gone too (a reboot), and everything left as it was.
		for i, how := range []string{"namespace deleted", "cache removed", "runner killed"} {
			w := netsandbox.NewWorkload(t)
			id := fmt.Sprintf("dead-%d", i)
			if _, err := c.Setup(ctxFor(t, time.Minute), &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: 28086 + i, To: 80}}}, w.Path); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "namespace deleted":
				w.Delete()
			case "cache removed":
				w.Delete()
				matches, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", nw.cfg.NetworkName+"-"+id+"-*"))
				for _, m := range matches {
					os.Remove(m)
				}
			}
		}
		report, err := c.GC(ctxFor(t, time.Minute), []string{"live-1"})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(report.IDs(), ","); got != "dead-0,dead-1,dead-2" {
			t.Errorf("GC collected %s", got)
		}
		if body, err := fetch(nw.gw4, 28085); err != nil || body != "hello from live-1" {
			t.Fatalf("live workload after GC (IPv4): %q, %v", body, err)
		}
		if body, err := fetch(nw.gw6, 28085); err != nil || body != "hello from live-1" {
			t.Fatalf("live workload after GC (IPv6): %q, %v", body, err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), liveAlloc, live.Path); err != nil {
			t.Fatal(err)
		}
		live.Delete()
		// The veths of "runner killed" go with its namespace at test end;
		// everything else must be gone already.
		now, _ := netsandbox.TakeSnapshot()
		for _, leak := range netsandbox.Leaks(base, now, nw.allowance()) {
			if !strings.HasPrefix(leak, "link veth") {
				t.Errorf("left after GC: %s", leak)
			}
		}
	})
}
