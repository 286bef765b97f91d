package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// shimRun is one exec of the shim as a runtime makes it: its output, and
// the CNI error it printed when it failed.
type shimRun struct {
	stdout []byte
	cerr   *types.Error
	err    error // the exec's, with the shim's stderr
}

// runShim execs the shim for command on network with container id and
// netns, its config mapping hostPort to 8080 and waiting at most 30s for
// the daemon, and reads its answer as the runtime does.
func (r *thickRig) runShim(network, command, id, netns string, hostPort int) shimRun {
	ctx, cancel := context.WithTimeout(context.Background(), runtimeWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(r.shimDir, "cninet-shim"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+id, "CNI_NETNS="+netns, "CNI_IFNAME=eth0", "CNI_PATH="+r.shimDir)
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"cniVersion": "1.1.0", "name": %q, "type": "cninet-shim", "socket": %q, "timeout": "30s",
		"runtimeConfig": {"portMappings": [{"hostPort": %d, "containerPort": 8080, "protocol": "tcp"}]}}`, network, r.socket, hostPort))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	run := shimRun{err: cmd.Run()}
	run.stdout = stdout.Bytes()
	if run.err != nil {
		run.err = fmt.Errorf("%w: %s", run.err, stderr.String())
		run.cerr = &types.Error{}
		if json.Unmarshal(run.stdout, run.cerr) != nil || run.cerr.Code == 0 {
			run.cerr = nil
		}
	}
	return run
}

// SIGTERM reaches the daemon in the middle of a burst of 20 ADDs that
// runtimes make through the shim, each for a namespace of its own: ADDs
// done, ADDs running on a delegate that hangs (rolled back once the
// drain timeout passes), ADDs queued, and ADDs that come while it drains
// or after it exited. Every runtime hears an answer, success or code 11
// (try again later), and the answer is the truth: an ADD that succeeded
// is attached, one that failed left nothing in its namespace. The
// daemon exits 0; then the runtimes' DELs, half of them run by the shim
// itself while the daemon is down, half by the daemon once restarted,
// all succeed and leave nothing behind.
func TestThickSIGTERMDuringABurstOfAddsThroughTheShim(t *testing.T) {
	netsandbox.Require(t)
	set := netsandbox.PluginSets(t)[0]
	hang := netsandbox.BuildPlugin(t, "hang")
	r := newThickRig(t, set, "1.1.0", false, func(r *thickRig) {
		r.extraPluginDirs = []string{hang}
		r.extraArgs = []string{"--drain-timeout", "2s", "--rollback-timeout", "30s", "--max-concurrent", "6"}
	})
	hanging := newNetwork(t, set, false)
	hanging.conf = withPlugin(t, hanging.conf, map[string]any{"type": "hang"})
	r.addNetwork(hanging, "1.1.0")
	base := baseline(t)

	const n = 20
	type add struct {
		network string
		w       *netsandbox.Workload
		port    int
		run     shimRun
	}
	adds := make([]*add, n)
	for i := range adds {
		adds[i] = &add{network: r.name(), w: netsandbox.NewWorkload(t), port: 29600 + i}
		if i%7 == 0 { // 0, 7, 14: three ADDs that never finish on their own
			adds[i].network = hanging.cfg.NetworkName
		}
	}
	id := func(i int) string { return fmt.Sprintf("drainburst-%d", i) }
	var wg sync.WaitGroup
	succeeded := make(chan int, n)
	start := func(from, to int) {
		for i := from; i < to; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := adds[i]
				a.run = r.runShim(a.network, "ADD", id(i), a.w.Path, a.port)
				if a.run.err == nil {
					succeeded <- i
				}
			}()
		}
	}
	// Half the burst first; SIGTERM once a hanging ADD runs and another
	// has succeeded, as the other half comes.
	start(0, n/2)
	waitForProcess(t, filepath.Join(hang, "hang"))
	select {
	case <-succeeded:
	case <-time.After(30 * time.Second):
		t.Fatal("no ADD of the first half succeeded within 30s")
	}
	start(n/2, n)
	if err := r.daemon.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	select {
	case err := <-r.exited:
		r.daemon = nil
		if err != nil {
			t.Fatalf("the daemon's exit after the drain: %v, want 0", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the daemon did not exit within 40s of SIGTERM")
	}

	var ok, refused int
	for i, a := range adds {
		attached := hasInterface(t, a.w, "eth0")
		switch {
		case a.run.err == nil:
			ok++
			if a.network == hanging.cfg.NetworkName {
				t.Errorf("ADD %d on the hanging delegate succeeded: %s", i, a.run.stdout)
			}
			var res struct {
				IPs []struct{ Address string } `json:"ips"`
			}
			if json.Unmarshal(a.run.stdout, &res) != nil || len(res.IPs) == 0 {
				t.Errorf("ADD %d succeeded without a result naming an address: %s", i, a.run.stdout)
			} else if p, err := netip.ParsePrefix(res.IPs[0].Address); err != nil || !netip.MustParsePrefix(r.nw.cfg.IPv4Subnet).Contains(p.Addr()) {
				t.Errorf("ADD %d got address %q, want one of %s", i, res.IPs[0].Address, r.nw.cfg.IPv4Subnet)
			}
			if !attached {
				t.Errorf("ADD %d succeeded, but its namespace has no eth0", i)
			}
		case a.run.cerr != nil && a.run.cerr.Code == types.ErrTryAgainLater:
			refused++
			if attached {
				t.Errorf("ADD %d answered code 11 (%s), but its namespace still has eth0", i, a.run.cerr.Msg)
			}
		default:
			t.Errorf("ADD %d answered %v (CNI error %+v), want success or code 11", i, a.run.err, a.run.cerr)
		}
	}
	t.Logf("of %d ADDs, %d succeeded and %d were answered code 11", n, ok, refused)
	if ok == 0 || refused < 3 {
		t.Errorf("%d ADDs succeeded and %d were refused; want at least one success and the three hanging ADDs refused", ok, refused)
	}

	// The runtimes' DELs: the even ones while the daemon is down (the
	// shim runs them), the odd ones through the daemon, restarted.
	del := func(i int) {
		if run := r.runShim(adds[i].network, "DEL", id(i), adds[i].w.Path, adds[i].port); run.err != nil {
			t.Errorf("DEL %d: %v (CNI error %+v)", i, run.err, run.cerr)
		}
	}
	for i := 0; i < n; i += 2 {
		del(i)
	}
	r.start()
	for i := 1; i < n; i += 2 {
		del(i)
	}
	allow := r.nw.allowance()
	allow.Chains = append(allow.Chains, hanging.allowance().Chains...)
	allow.Links = append(allow.Links, hanging.allowance().Links...)
	assertNoLeaks(t, base, allow)
}
