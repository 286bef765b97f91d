package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// repairUntil is an owners runner's repair mode: Check with Repair of
// r.ID in a loop until r.Stop appears, and three times more. A Check
// that fails (ErrCheckFailed: the attachment is being torn down, or
// gone) is counted, anything else ends it. It prints
// "whole=N failed=M". It pauses between two Checks for longer than a
// waiter polls the id lock: flock has no queue, and a loop that takes
// the lock again at once keeps a waiting Teardown out.
func repairUntil(ctx context.Context, c *cninet.Configurator, r ownersRunner) int {
	alloc := &cninet.Allocation{ID: r.ID, Ports: r.Ports}
	whole, failed := 0, 0
	for after := 0; after < 3; {
		if fileExists(r.Stop) {
			after++
		}
		switch err := c.Check(ctx, alloc, r.Netns, cninet.CheckOptions{Repair: true}); {
		case err == nil:
			whole++
		case errors.Is(err, cninet.ErrCheckFailed):
			failed++
		default:
			fmt.Fprintln(os.Stderr, "owners runner: repair:", err)
			return 1
		}
		time.Sleep(25 * time.Millisecond)
	}
	fmt.Printf("whole=%d failed=%d\n", whole, failed)
	return 0
}

// A repair racing the attachment's own Teardown and another owner's GC:
// a workload whose forward rules (and, on the iptables backends, its
// DNAT jumps) were deleted is repaired in a loop by one runner child
// while another tears it down (at once, or a moment later), and a
// Configurator of another owner collects a dead workload of its own, all
// at the same time. The repairs go on after the Teardown returned. Then
// nothing of the torn-down workload is left or comes back (its rules,
// reservation, cached result, record), the other owner's GC collected
// its own workload only, nothing leaks, and a live neighbour's rules,
// sampled throughout, never drop.
func TestARepairRacingItsAttachmentsTeardownAndAnotherOwnersGCBringsNothingBack(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		const owner = "race-owner"
		c := newOwnedConfigurator(t, set, nw.conf, owner)
		other := newOwnedConfigurator(t, set, nw.conf, "race-other")
		b := setUpDriftWorkload(t, c, nw, "race-neighbour", hostPort(nw.cfg.NetworkName, 0))
		t.Cleanup(func() { b.tearDown(t, c) })
		base := baseline(t)
		wantB, err := countRulesOf(nw.cfg.NetworkName, b.alloc.ID, b.addrs)
		if err != nil || wantB == 0 {
			t.Fatalf("the neighbour's rules: %d, %v", wantB, err)
		}
		for i, delay := range []time.Duration{0, 250 * time.Millisecond} {
			t.Run(fmt.Sprintf("the Teardown %s after the repairs begin", delay), func(t *testing.T) {
				a := setUpDriftWorkload(t, c, nw, fmt.Sprintf("race-%d", i), hostPort(nw.cfg.NetworkName, 1))
				wd := netsandbox.NewWorkload(t)
				dead := &cninet.Allocation{ID: fmt.Sprintf("race-dead-%d", i), Ports: []cninet.Port{{Value: hostPort(nw.cfg.NetworkName, 2), To: 8080}}}
				if _, err := other.Setup(ctxFor(t, time.Minute), dead, wd.Path); err != nil {
					t.Fatal(err)
				}
				wd.Delete()
				for _, addr := range a.addrs {
					deleteRulesMatching(t, "filter", "CNI-FORWARD", addr.String()+"/")
				}
				if set.Backend == "iptables" {
					deleteRulesMatching(t, "nat", "CNI-HOSTPORT-DNAT", fmt.Sprintf(`id: \"%s\"`, a.alloc.ID))
				}

				dir := t.TempDir()
				goFile, stop := filepath.Join(dir, "go"), filepath.Join(dir, "stop")
				repairer := ownersRunnerCmd(t, ownersRunner{Mode: "repair", ConfList: nw.conf, PluginDirs: []string{set.Dir}, Owner: owner,
					ID: a.alloc.ID, Ports: a.alloc.Ports, Netns: a.w.Path, Go: goFile, Stop: stop})
				tearer := ownersRunnerCmd(t, ownersRunner{Mode: "teardown", ConfList: nw.conf, PluginDirs: []string{set.Dir}, Owner: owner,
					ID: a.alloc.ID, Ports: a.alloc.Ports, Netns: a.w.Path, Go: goFile, Delay: delay})
				var repairOut, tearOut bytes.Buffer
				repairer.Stdout, repairer.Stderr = &repairOut, &repairOut
				tearer.Stdout, tearer.Stderr = &tearOut, &tearOut
				for _, r := range []*exec.Cmd{repairer, tearer} {
					if err := r.Start(); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(500 * time.Millisecond) // both have started (they wait for goFile after New)

				var tearErr, repairErr, gcErr error
				var collected string
				sampleWhile(t, "the neighbour's rules during the race", wantB, func() (int, error) {
					return countRulesOf(nw.cfg.NetworkName, b.alloc.ID, b.addrs)
				}, func() {
					gcDone := make(chan struct{})
					if err := os.WriteFile(goFile, nil, 0o644); err != nil {
						t.Error(err)
					}
					go func() {
						defer close(gcDone)
						report, err := other.GC(ctxFor(t, time.Minute), []string{})
						gcErr = err
						if report != nil {
							collected = strings.Join(report.IDs(), ",")
						}
					}()
					tearErr = tearer.Wait()
					if err := os.WriteFile(stop, nil, 0o644); err != nil {
						t.Error(err)
					}
					repairErr = repairer.Wait()
					<-gcDone
				})
				if tearErr != nil {
					t.Fatalf("the Teardown runner: %v\n%s", tearErr, tearOut.String())
				}
				if repairErr != nil || !strings.Contains(repairOut.String(), "whole=") {
					t.Fatalf("the repair runner: %v\n%s", repairErr, repairOut.String())
				}
				t.Logf("the repair runner: %s", strings.TrimSpace(repairOut.String()))
				if gcErr != nil || collected != dead.ID {
					t.Fatalf("the other owner's GC collected %q (%v), want its own %s only", collected, gcErr, dead.ID)
				}
				if n, err := countRulesOf(nw.cfg.NetworkName, a.alloc.ID, a.addrs); err != nil || n != 0 {
					t.Fatalf("%d rule(s) of the torn-down %s after the race (%v):\n  %s", n, a.alloc.ID, err, strings.Join(a.rules(t, nw), "\n  "))
				}
				assertNothingOf(t, c, nw, a)
				a.w.Delete()
				assertNoLeaksSettled(t, base, nw.allowance())
				b.assertServed(t, nw, "after the race")
			})
		}
	})
}
