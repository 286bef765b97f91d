package integration

import (
	"bytes"
	"context"
	"crypto/sha512"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/thick"
)

// One host shared by many owners and tools (DESIGN.md, "The host
// registry"): libcni's GC of one runtime, through the shim, never takes
// another runtime's live workload; a workload another tool made on the
// same network and cache is never collected while its namespace lives;
// a record of a newer cninet is kept byte for byte; and a GC of many
// leaked attachments does not hold up a Setup.

// thickRuntime is one CNI runtime on a thickRig's host: a conf dir of
// its own, holding a shim conflist for the rig's network that names the
// runtime's owner, and libcni's cache, which every runtime on the host
// shares (/var/lib/cni).
type thickRuntime struct {
	r      *thickRig
	owner  string
	netDir string
}

// runtime is a runtime of owner on r's network.
func (r *thickRig) runtime(owner string) *thickRuntime {
	r.t.Helper()
	rt := &thickRuntime{r: r, owner: owner, netDir: r.t.TempDir()}
	conf := fmt.Sprintf(`{"cniVersion": "1.1.0", "name": %q, "plugins": [{"type": "cninet-shim", "socket": %q, "owner": %q, "capabilities": {"portMappings": true}}]}`,
		r.name(), r.socket, owner)
	if err := os.WriteFile(filepath.Join(rt.netDir, r.name()+".conflist"), []byte(conf), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return rt
}

// mustCnitool runs cnitool as this runtime.
func (rt *thickRuntime) mustCnitool(env []string, args ...string) string {
	rt.r.t.Helper()
	out, errOut, err := rt.r.cnitoolIn(rt.netDir, env, args...)
	if err != nil {
		rt.r.t.Fatalf("%s's cnitool %s: %v\nstdout: %s\nstderr: %s", rt.owner, strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// cnitoolID is the container id cnitool gives the attachment of the
// namespace at netns (it takes none from its environment).
func cnitoolID(netns string) string {
	sum := sha512.Sum512([]byte(netns))
	return fmt.Sprintf("cnitool-%x", sum[:10])
}

// addressesOf are a result's addresses.
func addressesOf(res *types100.Result) []netip.Addr {
	var addrs []netip.Addr
	for _, ip := range res.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		addrs = append(addrs, a.Unmap())
	}
	return addrs
}

// recordsOf lists the host registry's records of id in stateDir.
func recordsOf(t *testing.T, stateDir, id string) []registry.Record {
	t.Helper()
	store, err := registry.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	recs, damaged, err := store.Of(id)
	if err != nil || len(damaged) > 0 {
		t.Fatalf("the registry's records of %s: %v, damaged %v", id, err, damaged)
	}
	return recs
}

// reservedBy is the id host-local's reservation of addr in network
// names, "" when there is none.
func reservedBy(network string, addr netip.Addr) string {
	raw, err := os.ReadFile(filepath.Join("/run/cni", network, addr.String()))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0])
}

// Two runtimes on one network through the shim (conf "owner" rt-a and
// rt-b), sharing libcni's cache: rt-a's `cnitool gc` — libcni's GC,
// which DELs every cached attachment of the network it was not told is
// valid, rt-b's included, then sends the GC command — takes rt-a's own
// dead workload and leaves rt-b's live one whole: its rules, counted
// from another goroutine, never fewer, its reservation, its CHECK and
// its mapped port. The positive control: the same sampler sees rt-b's
// own DEL drop the count.
func TestThickTwoRuntimesOnOneNetworkAGCOfOneNeverTakesTheOthersLiveWorkload(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newThickRig(t, set, "1.1.0", false)
		rtA, rtB := r.runtime("rt-a"), r.runtime("rt-b")
		base := baseline(t)
		wA, wB := netsandbox.NewWorkload(t), netsandbox.NewWorkload(t)
		idA, idB := cnitoolID(wA.Path), cnitoolID(wB.Path)
		asA, asB := portArgs(28801, 8080), portArgs(28802, 8080)
		addrsB := addressesOf(addResult(t, rtB.mustCnitool(asB, "add", r.name(), wB.Path), "1.1.0"))
		stop := serveHTTP(t, wB, 8080, idB)
		addrsA := addressesOf(addResult(t, rtA.mustCnitool(asA, "add", r.name(), wA.Path), "1.1.0"))
		if err := wA.Delete(); err != nil { // rt-a's workload is dead: its GC must collect it
			t.Fatal(err)
		}
		rulesB := func() (int, error) { return countRulesOf(r.name(), idB, addrsB) }
		before, err := rulesB()
		if err != nil || before == 0 {
			t.Fatalf("rt-b's rules before rt-a's GC: %d, %v; want some", before, err)
		}

		sampleWhile(t, "rt-b's live workload's rules while rt-a's cnitool gc runs", before, rulesB, func() {
			rtA.mustCnitool(nil, "gc", r.name(), wA.Path)
		})
		if got := reservedBy(r.name(), addrsB[0]); got != idB {
			t.Fatalf("the reservation of rt-b's %s after rt-a's GC names %q, want %s", addrsB[0], got, idB)
		}
		rtB.mustCnitool(asB, "check", r.name(), wB.Path)
		if body, err := fetch(r.nw.gw4, 28802); err != nil || body != "hello from "+idB {
			t.Fatalf("rt-b's mapped port after rt-a's GC: %q, %v", body, err)
		}
		if recs := recordsOf(t, thick.DefaultStateDir, idB); len(recs) != 1 || recs[0].Owner != "rt-b" {
			t.Fatalf("the registry's records of rt-b's workload after rt-a's GC: %+v, want one of rt-b", recs)
		}
		if n, err := countRulesOf(r.name(), idA, addrsA); err != nil || n != 0 {
			t.Fatalf("rt-a's dead workload after its GC: %d rule(s) left (%v), want none", n, err)
		}
		if recs := recordsOf(t, thick.DefaultStateDir, idA); len(recs) != 0 {
			t.Fatalf("the registry's records of rt-a's dead workload after its GC: %+v, want none", recs)
		}

		sampleDropWhile(t, "rt-b's rules during its own DEL (the positive control)", before, rulesB, func() {
			rtB.mustCnitool(asB, "del", r.name(), wB.Path)
		})
		stop()
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// A workload that cnitool attached itself (no cninet) to a network of
// the same name, with the same libcni cache, is never collected by the
// GC of a Configurator whose owner has nothing live, though its live set
// does not name it: its rules, counted from another goroutine, never
// fewer, its reservation and cached result kept. Once its namespace is
// gone, the same GC collects it (the GC's positive control), and the
// sampler's positive control is the workload's own DEL.
func TestAWorkloadAnotherToolMadeOnTheSameNetworkIsNeverCollectedWhileItLives(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		tool := cnitoolPath(t)
		toolConfs := t.TempDir()
		if _, err := cninet.WriteConfList(toolConfs, nw.conf); err != nil {
			t.Fatal(err)
		}
		c := newOwnedConfigurator(t, set, nw.conf, "orchestrator")
		base := baseline(t)
		cnitool := func(command string, port int, w *netsandbox.Workload) string {
			t.Helper()
			out, errOut, err := runCnitool(tool, toolConfs, set.Dir, portArgs(port, 8080), command, nw.cfg.NetworkName, w.Path)
			if err != nil {
				t.Fatalf("cnitool %s %s: %v\n%s\n%s", command, w.Path, err, out, errOut)
			}
			return out
		}
		run := func(port int, w *netsandbox.Workload) (id string, addrs []netip.Addr, rules func() (int, error)) {
			t.Helper()
			id, addrs = cnitoolID(w.Path), addressesOf(addResult(t, cnitool("add", port, w), "1.0.0"))
			return id, addrs, func() (int, error) { return countRulesOf(nw.cfg.NetworkName, id, addrs) }
		}
		w := netsandbox.NewWorkload(t)
		id, addrs, rules := run(28803, w)
		before, err := rules()
		if err != nil || before == 0 {
			t.Fatalf("the tool's workload's rules: %d, %v; want some", before, err)
		}
		// The orchestrator's own dead workload, for its GC to collect
		// meanwhile.
		dead := &cninet.Allocation{ID: fmt.Sprintf("orchestrated-%d", networkSeq.Add(1)), Ports: []cninet.Port{{Value: 28806, To: 8080}}}
		wDead := netsandbox.NewWorkload(t)
		if _, err := c.Setup(ctxFor(t, time.Minute), dead, wDead.Path); err != nil {
			t.Fatal(err)
		}
		if err := wDead.Delete(); err != nil {
			t.Fatal(err)
		}
		cached := filepath.Join("/var/lib/cni/results", nw.cfg.NetworkName+"-"+id+"-eth0")
		sampleWhile(t, "the tool's live workload's rules while an owner with nothing live collects its own dead one", before, rules, func() {
			report, err := c.GC(ctxFor(t, time.Minute), []string{})
			if err != nil || slices.Contains(report.IDs(), id) || !slices.Contains(report.IDs(), dead.ID) {
				t.Errorf("GC: %v, collected %v; want %s and nothing of %s", err, report.IDs(), dead.ID, id)
			}
		})
		if got := reservedBy(nw.cfg.NetworkName, addrs[0]); got != id {
			t.Fatalf("the reservation of the tool's %s after GC names %q, want %s", addrs[0], got, id)
		}
		if _, err := os.Stat(cached); err != nil {
			t.Fatalf("the tool's cached result after GC: %v", err)
		}

		if err := w.Delete(); err != nil {
			t.Fatal(err)
		}
		report, err := c.GC(ctxFor(t, time.Minute), []string{})
		if err != nil || !slices.Contains(report.IDs(), id) {
			t.Fatalf("GC once the tool's workload's namespace is gone: %v, collected %v; want %s", err, report.IDs(), id)
		}
		if n, err := rules(); err != nil || n != 0 {
			t.Fatalf("the tool's dead workload after GC: %d rule(s) (%v), want none", n, err)
		}

		w2 := netsandbox.NewWorkload(t)
		_, _, rules2 := run(28804, w2)
		before2, err := rules2()
		if err != nil || before2 == 0 {
			t.Fatalf("the second tool workload's rules: %d, %v; want some", before2, err)
		}
		sampleDropWhile(t, "the tool's workload's rules during its own DEL (the positive control)", before2, rules2, func() {
			cnitool("del", 28804, w2)
		})
		w2.Delete()
		assertNoLeaks(t, base, nw.allowance())
	})
}

// A record of a newer cninet (format version 2) stands where a Setup's
// record belongs: Setup fails naming the file and changes nothing on the
// host; Teardown and GC leave it and say so; the file is byte for byte
// what it was after each.
func TestARecordOfANewerCninetIsKeptByteForByte(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		state := t.TempDir() // its own registry: no other story's GC need see the file
		c, err := cninet.New(cninet.Config{ConfList: nw.conf, PluginDirs: []string{set.Dir}, Owner: "orchestrator", StateDir: state,
			Logger: hclog.New(&hclog.LoggerOptions{Name: "newer", Level: hclog.Warn, Output: testWriter{t}})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		id := fmt.Sprintf("newer-%d", networkSeq.Add(1))
		path := filepath.Join(state, "attachments", id, nw.cfg.NetworkName, "eth0")
		content := []byte(fmt.Sprintf(`{"version": 2, "owner": "orchestrator", "network": %q, "containerID": %q, "ifName": "eth0",`+
			` "state": "attached", "addresses": {"v4": ["%s.9"]}, "whatever": [1, 2, 3]}`+"\n", nw.cfg.NetworkName, id, subnet24(t, networkSeq.Load())))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: 28805, To: 8080}}}
		refused := func(when string, err error) {
			t.Helper()
			if !errors.Is(err, cninet.ErrRecordUnreadable) || !strings.Contains(err.Error(), path) {
				t.Fatalf("%s: %v, want ErrRecordUnreadable naming %s", when, err, path)
			}
		}
		kept := func(when string) {
			t.Helper()
			if raw, err := os.ReadFile(path); err != nil || !bytes.Equal(raw, content) {
				t.Fatalf("the newer record after %s: %q, %v; want it byte for byte", when, raw, err)
			}
		}
		_, err = c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		refused("Setup", err)
		kept("Setup")
		assertNoLeaks(t, base, nw.allowance()) // Setup changed nothing
		refused("Teardown", c.Teardown(ctxFor(t, time.Minute), alloc, w.Path))
		kept("Teardown")
		report, err := c.GC(ctxFor(t, time.Minute), []string{})
		if err != nil || !slices.Equal(report.Unreadable(), []string{path}) {
			t.Fatalf("GC: %v, unreadable %v; want %s reported", err, report.Unreadable(), path)
		}
		kept("GC")
		if recs, err := c.Attachments(); !errors.Is(err, cninet.ErrIO) || len(recs) != 1 || recs[0].State != "unreadable" {
			t.Fatalf("Attachments: %+v, %v; want the file listed unreadable, and ErrIO", recs, err)
		}
	})
}

// noopPlugin is a CNI plugin (a shell script) that does nothing: ADD
// passes the previous result through, DEL succeeds. Leaked attachments
// of a network of it cost a GC cninet's own work and one process each.
const noopPlugin = `#!/bin/sh
case "$CNI_COMMAND" in
ADD) cat >/dev/null; echo '{"cniVersion":"1.0.0"}' ;;
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}' ;;
*) cat >/dev/null ;;
esac
`

// leakedRecords writes n records of owner's attachments of network
// (conflist conf) whose namespaces are gone, as a host keeps them
// across a reboot or a crashed runner leaves them.
func leakedRecords(t *testing.T, stateDir, owner string, conf []byte, network string, n int) {
	t.Helper()
	store, err := registry.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		rec := &registry.Record{Owner: owner, Key: identity.Key{Network: network, ID: fmt.Sprintf("leaked-%d", i), IfName: "eth0"},
			NetNS: fmt.Sprintf("/run/netns/leaked-%d", i), State: registry.Attached, ConfList: conf, Plugins: []registry.Plugin{{Type: "noop"}}}
		if err := store.Put(rec); err != nil {
			t.Fatal(err)
		}
	}
}

// A GC of 2,000 leaked attachments (records whose namespaces are gone)
// runs for a while; a Setup of a new workload, by another process's
// Configurator, started once the GC is under way, is done long before
// the GC is: the GC holds no lock that Setup waits for while it detaches
// the dead attachments one by one, each under its own id's lock.
func TestAGCOfManyLeakedAttachmentsDoesNotHoldUpASetup(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		const n = 2000
		nw := newNetwork(t, set, false)
		noopDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(noopDir, "noop"), []byte(noopPlugin), 0o755); err != nil {
			t.Fatal(err)
		}
		leakNet := fmt.Sprintf("leak%d", networkSeq.Add(1))
		leakConf := []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"noop"}]}`, leakNet))
		state := t.TempDir()
		leakedRecords(t, state, "leaky", leakConf, leakNet, n)
		newC := func(owner string) *cninet.Configurator {
			c, err := cninet.New(cninet.Config{ConfList: nw.conf, ConfLists: [][]byte{leakConf}, PluginDirs: []string{set.Dir, noopDir}, Owner: owner, StateDir: state,
				Logger: hclog.New(&hclog.LoggerOptions{Name: owner, Level: hclog.Error, Output: testWriter{t}})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		collector, runner := newC("leaky"), newC("runner")
		base := baseline(t)
		gcStart := time.Now()
		gcDone := make(chan error, 1)
		var gcEnd time.Time
		go func() {
			report, err := collector.GC(context.Background(), []string{})
			gcEnd = time.Now()
			if err == nil && report.Count(cninet.GCRecordedAttachment) != n {
				err = fmt.Errorf("collected %d recorded attachments, want %d", report.Count(cninet.GCRecordedAttachment), n)
			}
			gcDone <- err
		}()
		ids := func() int {
			entries, _ := os.ReadDir(filepath.Join(state, "attachments"))
			return len(entries)
		}
		for ids() > n-20 { // under way: 20 collected
			select {
			case err := <-gcDone:
				t.Fatalf("GC ended (%v) before it collected 20 of %d", err, n)
			case <-time.After(10 * time.Millisecond):
			}
		}
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: fmt.Sprintf("during-gc-%d", networkSeq.Load())}
		setupStart := time.Now()
		if _, err := runner.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatalf("Setup during the GC: %v", err)
		}
		setupTook, left := time.Since(setupStart), ids()
		select {
		case err := <-gcDone:
			t.Fatalf("the GC ended (%v) before the Setup did (after %v): nothing shows the Setup did not wait for it", err, setupTook)
		default:
		}
		if err := <-gcDone; err != nil {
			t.Fatal(err)
		}
		t.Logf("a Setup started %v into a GC of %d leaked attachments took %v and ended with %d still recorded; the GC took %v",
			setupStart.Sub(gcStart).Round(time.Millisecond), n, setupTook.Round(time.Millisecond), left, gcEnd.Sub(gcStart).Round(time.Millisecond))
		if err := runner.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		if left := ids(); left != 0 {
			t.Fatalf("%d ids still recorded after the GC and the Teardown", left)
		}
		w.Delete()
		assertNoLeaks(t, base, nw.allowance())
	})
}
