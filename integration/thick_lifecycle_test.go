package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// The delegate conflist goes after an ADD and the daemon restarts with
// an empty conf dir: it serves, not ready (STATUS 50), and the runtime's
// DEL still removes everything the ADD made, with the conflist the host
// registry recorded then; the STATUS is ready again once a conflist is
// back.
func TestThickDelAfterTheConflistWentAndTheDaemonRestarted(t *testing.T) {
	netsandbox.Require(t)
	r := newThickRig(t, netsandbox.PluginSets(t)[0], "1.1.0", false)
	base := baseline(t)
	w := netsandbox.NewWorkload(t)
	r.mustCnitool(portArgs(28311, 8080), "add", r.name(), w.Path)
	conf := filepath.Join(r.confDir, r.name()+".conflist")
	saved, err := os.ReadFile(conf)
	if err != nil {
		t.Fatalf("the rig's delegate conflist: %v", err)
	}
	r.stop()
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	r.start()
	if cerr := r.shimError("STATUS", "", ""); cerr.Code != 50 || !strings.Contains(cerr.Msg, "no delegate conflist") {
		t.Fatalf("STATUS with an empty conf dir answered %+v, want code 50 saying there is no conflist", cerr)
	}
	r.mustCnitool(portArgs(28311, 8080), "del", r.name(), w.Path)
	assertNoLeaks(t, base, r.nw.allowance())
	if err := os.WriteFile(conf, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	r.mustCnitool(nil, "status", r.name(), w.Path)
}

// SIGTERM while an ADD hangs in a plugin: past --drain-timeout the
// daemon cancels the ADD and rolls it back, so the runtime hears an
// error and nothing of the attachment is left; the daemon exits cleanly
// and the delegate conflist stays.
func TestThickDrainRollsBackAnUnfinishedAdd(t *testing.T) {
	netsandbox.Require(t)
	set := netsandbox.PluginSets(t)[0]
	hang := netsandbox.BuildPlugin(t, "hang")
	r := newThickRig(t, set, "1.1.0", false, func(r *thickRig) {
		r.extraPluginDirs = []string{hang}
		r.extraArgs = []string{"--drain-timeout", "1s", "--rollback-timeout", "30s"}
	})
	hanging := newNetwork(t, set, false)
	hanging.conf = withPlugin(t, hanging.conf, map[string]any{"type": "hang"})
	r.addNetwork(hanging, "1.1.0")
	base := baseline(t)
	w := netsandbox.NewWorkload(t)
	added := make(chan error, 1)
	go func() {
		_, stderr, err := r.cnitool(nil, "add", hanging.cfg.NetworkName, w.Path)
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr)
		}
		added <- err
	}()
	waitForProcess(t, filepath.Join(hang, "hang"))
	r.stop() // fails the test unless the daemon exits 0
	err := <-added
	if err == nil || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("the runtime's ADD: %v, want an error saying it was rolled back", err)
	}
	if _, err := os.Stat(filepath.Join(r.confDir, hanging.cfg.NetworkName+".conflist")); err != nil {
		t.Fatalf("the delegate conflist after the drain: %v", err)
	}
	assertNoLeaks(t, base, hanging.allowance())
}

// waitForProcess waits until a process runs the executable at path.
func waitForProcess(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		procs, _ := filepath.Glob("/proc/[0-9]*/exe")
		for _, exe := range procs {
			if target, err := os.Readlink(exe); err == nil && target == path {
				return
			}
		}
	}
	t.Fatalf("no process ran %s within 30s", path)
}
