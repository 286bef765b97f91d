package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// A runner is killed (SIGKILL) in the middle of a Teardown, right after
// one plugin's DEL: the test binary runs the Teardown as a child process
// and the killparent plugin, chained right before that plugin, kills it.

// crashRunnerEnv, set in a child's environment, makes the test binary a
// runner that does what it names (a crashRunner as JSON) and exits.
const crashRunnerEnv = "CNINET_CRASH_RUNNER"

// crashRunner is what a runner child process is asked to do: the
// Teardown of one allocation.
type crashRunner struct {
	ConfList   []byte
	PluginDirs []string
	ID         string
	Ports      []cninet.Port
	Netns      string
}

// runCrashRunner is the child's whole life; it returns its exit code.
func runCrashRunner(spec string) int {
	var r crashRunner
	if err := json.Unmarshal([]byte(spec), &r); err != nil {
		fmt.Fprintln(os.Stderr, "crash runner:", err)
		return 2
	}
	c, err := cninet.New(cninet.Config{ConfList: r.ConfList, PluginDirs: r.PluginDirs})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = c.Teardown(ctx, &cninet.Allocation{ID: r.ID, Ports: r.Ports}, r.Netns)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash runner:", err)
		return 1
	}
	return 0
}

// withKillParentBefore is conf with the killparent plugin chained right
// before the plugin of type before, armed for the DEL of id by the
// absence of a file in stateDir (see arm).
func withKillParentBefore(t *testing.T, conf []byte, before, id, stateDir string) []byte {
	t.Helper()
	var list map[string]any
	if err := json.Unmarshal(conf, &list); err != nil {
		t.Fatal(err)
	}
	var plugins []any
	for _, p := range list["plugins"].([]any) {
		if p.(map[string]any)["type"] == before {
			plugins = append(plugins, map[string]any{"type": "killparent", "stateDir": stateDir, "containerID": id})
		}
		plugins = append(plugins, p)
	}
	if len(plugins) == len(list["plugins"].([]any)) {
		t.Fatalf("the conflist has no plugin %q", before)
	}
	list["plugins"] = plugins
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// arm makes killparent kill at the next DEL of id (armed true), or never.
func arm(t *testing.T, stateDir, id string, armed bool) {
	t.Helper()
	path := filepath.Join(stateDir, "killed-"+id)
	if armed {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The reboot history (the old allocation's stale cached result names the
// address the new workload holds now), then the old allocation's Teardown
// in a runner killed right after each plugin's DEL in turn. At every
// instant the new workload has all its firewall rules and stays
// reachable; the restarted runner's Teardown then finishes with nothing
// left of the old allocation.
func TestARunnerKilledAfterAnyPluginsDELNeverCostsTheLiveNeighbourItsRules(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		for _, after := range []string{"portmap", "firewall", "bridge", "loopback"} {
			t.Run("killed after "+after+"'s DEL", func(t *testing.T) {
				killDir := netsandbox.BuildPlugin(t, "killparent")
				stateDir := t.TempDir()
				nw := newNetwork(t, set, true)
				nw.conf = withKillParentBefore(t, nw.conf, after, "old", stateDir)
				c := newConfigurator(t, set, nw.conf, killDir)
				base := baseline(t)
				arm(t, stateDir, "old", false)
				r := playReboot(t, c, nw)
				serveHTTP(t, r.newNS, 8080, "new")
				want := 2 * len(r.newAddrs)
				count := func() (int, error) { return countForwardRules(r.newAddrs) }

				arm(t, stateDir, "old", true)
				spec, err := json.Marshal(crashRunner{ConfList: nw.conf, PluginDirs: []string{set.Dir, killDir},
					ID: r.old.ID, Ports: r.old.Ports, Netns: r.oldNetns})
				if err != nil {
					t.Fatal(err)
				}
				runner := exec.Command(os.Args[0], "-test.run=^$")
				runner.Env = append(os.Environ(), crashRunnerEnv+"="+string(spec))
				var stderr bytes.Buffer
				runner.Stderr = &stderr
				var runErr error
				sampleWhile(t, "new's CNI-FORWARD rules while the runner dies", want, count, func() { runErr = runner.Run() })
				var exit *exec.ExitError
				if !errors.As(runErr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("the runner ended with %v, want killed by SIGKILL after %s's DEL; stderr:\n%s", runErr, after, stderr.String())
				}
				assertForwardRules(t, "after the runner was killed", r.newAddrs, 2)
				assertReachable(t, "after the runner was killed", r.newPort, "new", nw.gw4, nw.gw6)

				sampleWhile(t, "new's CNI-FORWARD rules during the restarted runner's Teardown", want, count, func() {
					runErr = c.Teardown(ctxFor(t, time.Minute), r.old, r.oldNetns)
				})
				if runErr != nil {
					t.Fatal(runErr)
				}
				assertReachable(t, "after the restarted runner's Teardown", r.newPort, "new", nw.gw4, nw.gw6)
				if err := c.Teardown(ctxFor(t, time.Minute), r.new, r.newNS.Path); err != nil {
					t.Fatal(err)
				}
				r.newNS.Delete()
				assertNoLeaks(t, base, nw.allowance())
			})
		}
	})
}
