package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gocni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// withPlugin appends a plugin to a conflist.
func withPlugin(t *testing.T, conf []byte, plugin map[string]any) []byte {
	t.Helper()
	var list map[string]any
	if err := json.Unmarshal(conf, &list); err != nil {
		t.Fatal(err)
	}
	list["plugins"] = append(list["plugins"].([]any), plugin)
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestNamespaceDeletedBeforeTeardownLeavesNothing(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "gone-1", Ports: []cninet.Port{{Value: 28081, To: 80}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		if err := w.Delete(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // and a second Teardown is a no-op
			if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
				t.Fatalf("teardown %d: %v", i+1, err)
			}
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

// The reason force cleanup exists: go-cni's Remove alone, after the
// namespace was deleted, returns nil and leaves the masquerade rule and
// chain. If the plugins ever stop leaking, this test says so.
func TestGoCNIAloneLeaksWhenTheNamespaceIsDeletedFirst(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		raw, err := gocni.New(gocni.WithPluginDir([]string{set.Dir}), gocni.WithConfListBytes(nw.conf))
		if err != nil {
			t.Fatal(err)
		}
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		if _, err := raw.Setup(ctxFor(t, time.Minute), "raw-1", w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		if err := raw.Remove(ctxFor(t, time.Minute), "raw-1", w.Path); err != nil {
			t.Fatalf("Remove: %v (the leak case returns nil)", err)
		}
		now, _ := netsandbox.TakeSnapshot()
		leaks := netsandbox.Leaks(base, now, nw.allowance())
		if !strings.Contains(strings.Join(leaks, "\n"), `id: \"raw-1\"`) && !strings.Contains(strings.Join(leaks, "\n"), "id: raw-1") {
			t.Fatalf("go-cni alone left no masquerade rule; leaks: %v", leaks)
		}
		t.Logf("go-cni alone leaked %d item(s): %v", len(leaks), leaks)
		// cninet's Teardown of the same id cleans up after it.
		c := newConfigurator(t, set, nw.conf)
		if err := c.Teardown(ctxFor(t, time.Minute), &cninet.Allocation{ID: "raw-1"}, w.Path); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

func TestConcurrentSetupsFromAColdStartAllSucceed(t *testing.T) {
	for _, n := range []int{16, 32} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { testColdStart(t, n) })
	}
}

func testColdStart(t *testing.T, n int) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false) // a fresh bridge name: no bridge exists yet
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		workloads := make([]*netsandbox.Workload, n)
		for i := range workloads {
			workloads[i] = netsandbox.NewWorkload(t)
		}
		for i, w := range workloads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				alloc := &cninet.Allocation{ID: fmt.Sprintf("cold-%d", i), Ports: []cninet.Port{{Value: 29000 + i, To: 80}}}
				if _, err := c.Setup(ctxFor(t, 2*time.Minute), alloc, w.Path); err != nil {
					errs <- fmt.Errorf("setup %s: %w", alloc.ID, err)
					return
				}
				if err := c.Teardown(ctxFor(t, 2*time.Minute), alloc, w.Path); err != nil {
					errs <- fmt.Errorf("teardown %s: %w", alloc.ID, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

func TestSetupRecoversFromAPluginThatFailsItsFirstADD(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		state := t.TempDir()
		conf := withPlugin(t, nw.conf, map[string]any{"type": "failonce", "stateDir": state})
		c := newConfigurator(t, set, conf, netsandbox.BuildPlugin(t, "failonce"))
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "flaky-1", Ports: []cninet.Port{{Value: 28082, To: 8080}}}
		st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if err != nil {
			t.Fatalf("Setup did not recover: %v", err)
		}
		if _, err := os.Stat(filepath.Join(state, "flaky-1")); err != nil {
			t.Fatal("the failing plugin never ran")
		}
		serveHTTP(t, w, 8080, "flaky-1")
		if body, err := fetch(nw.gw4, 28082); err != nil || body != "hello from flaky-1" {
			t.Fatalf("after recovery: %q, %v (address %s)", body, err, st.Address)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

func TestSetupReturnsWhenTheContextExpiresOnAHangingPluginAndLeavesNothing(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		conf := withPlugin(t, nw.conf, map[string]any{"type": "hang"})
		c := newConfigurator(t, set, conf, netsandbox.BuildPlugin(t, "hang"))
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.Setup(ctx, &cninet.Allocation{ID: "hung-1", Ports: []cninet.Port{{Value: 28083}}}, w.Path)
		if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(fmt.Sprint(err), "signal: killed") {
			t.Fatalf("err = %v, want the context's deadline", err)
		}
		if d := time.Since(start); d > time.Minute {
			t.Fatalf("Setup took %s after a 2s deadline", d)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

func TestMissingPluginFailsClearlyAndCreatesNothing(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		conf := withPlugin(t, nw.conf, map[string]any{"type": "no-such-plugin"})
		c := newConfigurator(t, set, conf)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		_, err := c.Setup(ctxFor(t, time.Minute), &cninet.Allocation{ID: "missing-1"}, w.Path)
		if !errors.Is(err, cninet.ErrPluginMissing) || !strings.Contains(err.Error(), "no-such-plugin") {
			t.Fatalf("err = %v, want ErrPluginMissing naming the plugin", err)
		}
		if err := c.Status(ctxFor(t, time.Minute)); !errors.Is(err, cninet.ErrPluginMissing) {
			t.Errorf("Status = %v, want ErrPluginMissing", err)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

func TestMalformedConflistIsRejectedBeforeAnythingRuns(t *testing.T) {
	netsandbox.Require(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "broken.conflist"), []byte(`{"cniVersion":"1.0.0","name":"broken","plugins":[{"type":`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := baseline(t)
	_, err := cninet.New(cninet.Config{ConfDir: dir, NetworkName: "broken"})
	if !errors.Is(err, cninet.ErrInvalidConfig) || !strings.Contains(err.Error(), "broken.conflist") {
		t.Fatalf("err = %v, want ErrInvalidConfig naming the file", err)
	}
	assertNoLeaks(t, base, netsandbox.Allowance{})
}
