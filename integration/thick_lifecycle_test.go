package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
