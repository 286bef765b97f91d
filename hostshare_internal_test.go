package cninet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/registry"
)

// One host, many owners (DESIGN.md, "The host registry"): a DEL never
// crosses owners by accident, state no record claims is collected only
// once its namespace is gone, a record from an earlier boot is anyone's
// to collect, unreadable records are kept, and a GC collects each dead
// allocation under its own lock.

// liveNamespace is a network namespace this test made: that of a child
// process (in a user namespace of its own when not root), at
// /proc/<pid>/ns/net, until kill.
type liveNamespace struct {
	path string
	cmd  *exec.Cmd
}

func newLiveNamespace(t *testing.T) *liveNamespace {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	flags := uintptr(syscall.CLONE_NEWNET)
	if os.Geteuid() != 0 {
		flags |= syscall.CLONE_NEWUSER
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	if err := cmd.Start(); err != nil {
		t.Fatalf("a child in a network namespace of its own: %v", err)
	}
	n := &liveNamespace{path: fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid), cmd: cmd}
	t.Cleanup(n.kill)
	return n
}

// kill ends the child: its namespace goes with it.
func (n *liveNamespace) kill() {
	if n.cmd.ProcessState == nil {
		n.cmd.Process.Kill()
		n.cmd.Wait()
	}
}

// rewriteRecord changes the record of id in network as ifName on disk,
// as another cninet (or another boot) would have written it.
func (f multiFixture) rewriteRecord(t *testing.T, id, network, ifName string, change func(*registry.Record)) {
	t.Helper()
	store, err := registry.Open(f.state)
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := store.Of(id)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if recs[i].Network == network && recs[i].IfName == ifName {
			change(&recs[i])
			if err := store.Put(&recs[i]); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no record of %s in %s as %s", id, network, ifName)
}

const earlierBoot = "00000000-0000-4000-8000-000000000000"

func TestADELOfAnotherOwnersAttachmentChangesNothingWhileItsNamespaceLives(t *testing.T) {
	cases := []struct {
		name     string
		delOwner string
		before   func(t *testing.T, f multiFixture, ns *liveNamespace)
		detached bool
	}{
		{"its own owner's DEL detaches it", "rt-b", nil, true},
		{"another owner's DEL while its namespace lives changes nothing and succeeds", "rt-a", nil, false},
		{"another owner's DEL once its namespace is gone detaches it", "rt-a", func(t *testing.T, f multiFixture, ns *liveNamespace) { ns.kill() }, true},
		{"another owner's DEL of a record of an earlier boot detaches it", "rt-a", func(t *testing.T, f multiFixture, ns *liveNamespace) {
			f.rewriteRecord(t, "w", "b", "eth0", func(r *registry.Record) { r.Boot = earlierBoot })
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			ns := newLiveNamespace(t)
			alloc := &Allocation{ID: "w"}
			ctx := context.Background()
			if _, err := f.c.Connect(WithOwner(ctx, "rt-b"), alloc, "b", ns.path, ConnectOptions{IfName: "eth0"}); err != nil {
				t.Fatal(err)
			}
			cached := f.drv.cachePath(attachments.Request{ID: "w"}, attachments.Attachment{Conf: catalog.Conf{Info: catalog.Info{Name: "b"}}, IfName: "eth0"})
			if tc.before != nil {
				tc.before(t, f, ns)
			}
			if err := f.c.Disconnect(WithOwner(ctx, tc.delOwner), alloc, "b", ns.path, ConnectOptions{IfName: "eth0"}); err != nil {
				t.Fatalf("the DEL: %v, want nil", err)
			}
			want := map[string]string{"b": "ADD eth0"}
			if tc.detached {
				want["b"] += ", DEL eth0"
			}
			if got := f.drv.byNetwork(); got["b"] != want["b"] {
				t.Fatalf("plugin commands %v, want %v", got, want)
			}
			recs, err := f.c.Attachments("w")
			if err != nil {
				t.Fatal(err)
			}
			if kept := len(recs) == 1 && recs[0].Owner == "rt-b"; kept == tc.detached {
				t.Fatalf("records after the DEL: %+v, want rt-b's kept: %v", recs, !tc.detached)
			}
			if _, err := os.Stat(cached); (err == nil) == tc.detached {
				t.Fatalf("libcni's cached result after the DEL: %v, want kept: %v", err, !tc.detached)
			}
		})
	}
}

// writeCacheIn writes libcni's cached result of an attachment no record
// claims: another tool's, made in netns.
func (f multiFixture) writeCacheIn(t *testing.T, network, id, netns string) string {
	t.Helper()
	path := filepath.Join(f.cache, "results", fmt.Sprintf("%s-%s-eth0", network, id))
	body := fmt.Sprintf(`{"kind":"cniCacheV1","containerId":%q,"ifName":"eth0","networkName":%q,"netns":%q,"config":"e30=",`+
		`"result":{"cniVersion":"1.0.0","ips":[{"address":"198.18.1.50/24"}]}}`, id, network, netns)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A cached attachment that no record claims — another tool's workload on
// a network of the same name, sharing libcni's cache — is not collected
// because the caller's live set does not name it: GC keeps it, its
// rules and cached result, while its namespace lives, and collects it
// once the namespace is gone (the positive control of the same GC).
func TestGCKeepsAnUnrecordedAttachmentWhileItsNamespaceLives(t *testing.T) {
	for _, netns := range []string{"live", ""} {
		t.Run(fmt.Sprintf("namespace %q", netns), func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			ns := newLiveNamespace(t)
			path := ns.path
			if netns == "" {
				path = "" // a cache that names no namespace proves nothing either
			}
			cached := f.writeCacheIn(t, "b", "tool-1", path)
			f.leakMasquerade("b", "tool-1", "198.18.1.50")
			report, err := f.c.GC(context.Background(), []string{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(cached); err != nil || !f.hasMasquerade("b", "tool-1") || report.Len() != 0 {
				t.Fatalf("after GC the unrecorded live attachment's cache: %v, masquerade kept %v, report %v; want all kept, nothing removed",
					err, f.hasMasquerade("b", "tool-1"), report.Removed())
			}
			if netns == "" {
				return
			}
			ns.kill()
			if _, err := f.c.GC(context.Background(), []string{}); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(cached); !errors.Is(err, os.ErrNotExist) || f.hasMasquerade("b", "tool-1") {
				t.Fatalf("after GC, with its namespace gone, the unrecorded attachment's cache: %v, masquerade kept %v; want both gone",
					err, f.hasMasquerade("b", "tool-1"))
			}
		})
	}
}

// Another owner's attachment is not this GC's to collect, until it is
// known dead: recorded in an earlier boot, whoever owns it, it is.
func TestAnyOwnersGCCollectsARecordOfAnEarlierBoot(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	ns := newLiveNamespace(t)
	ctx := context.Background()
	if _, err := f.c.Connect(WithOwner(ctx, "rt-b"), &Allocation{ID: "w"}, "b", ns.path, ConnectOptions{IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	gcOf := func(when string) *GCReport {
		t.Helper()
		report, err := f.c.GC(WithOwner(ctx, "rt-a"), []string{})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		return report
	}
	if report := gcOf("this boot"); report.Len() != 0 || strings.Contains(f.drv.log(), "DEL") {
		t.Fatalf("rt-a's GC of rt-b's record of this boot: removed %v, plugin commands %s; want nothing", report.Removed(), f.drv.log())
	}
	f.rewriteRecord(t, "w", "b", "eth0", func(r *registry.Record) { r.Boot = earlierBoot })
	report := gcOf("an earlier boot")
	if report.Count(GCRecordedAttachment) != 1 || !strings.Contains(f.drv.log(), "DEL b/eth0") {
		t.Fatalf("rt-a's GC of rt-b's record of an earlier boot: removed %v, plugin commands %s; want it detached", report.Removed(), f.drv.log())
	}
	if recs, err := f.c.Attachments("w"); err != nil || len(recs) != 0 {
		t.Fatalf("records after: %+v, %v; want none", recs, err)
	}
}

// A GC collects each dead allocation under that allocation's lock alone:
// while its DEL of one runs, a Setup of another allocation, in this
// Configurator or another process's, runs to its end — and that new
// allocation, which the GC's live set (older) does not name, is not
// collected: it was recorded while the GC ran.
func TestAGCNeverStallsTheSetupOfAnotherAllocation(t *testing.T) {
	for _, where := range []string{"this Configurator", "another process"} {
		t.Run(where, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			ctx := context.Background()
			if _, err := f.c.Connect(ctx, &Allocation{ID: "dead-1"}, "b", "/gone", ConnectOptions{IfName: "eth0"}); err != nil {
				t.Fatal(err)
			}
			setter := f.c
			if where == "another process" {
				setter = f.configurator(t)
			}
			setupDone := make(chan error, 1)
			f.drv.delHook = func(_ context.Context, id string) {
				if id != "dead-1" {
					return
				}
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, err := setter.Connect(wctx, &Allocation{ID: "new-1"}, "b", "/new", ConnectOptions{IfName: "eth0"})
				setupDone <- err
			}
			report, err := f.c.GC(ctx, []string{})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-setupDone:
				if err != nil {
					t.Fatalf("a Setup of another allocation while GC detached dead-1: %v, want it done", err)
				}
			default:
				t.Fatal("GC detached dead-1 without a DEL")
			}
			if !slices.Equal(report.IDs(), []string{"dead-1"}) {
				t.Fatalf("GC collected %v, want dead-1 alone", report.IDs())
			}
			if recs, err := f.c.Attachments("new-1"); err != nil || len(recs) != 1 || strings.Contains(f.drv.log(), "DEL b/eth0, DEL") {
				t.Fatalf("new-1 after the GC: records %+v (%v), plugin commands %s; want it kept", recs, err, f.drv.log())
			}
		})
	}
}

// A registry file this cninet cannot read stands where an attachment's
// record belongs: every operation leaves it byte for byte and the
// attachment alone, and says so naming the file.
func TestAnUnreadableRecordIsKeptByEveryOperation(t *testing.T) {
	for _, content := range []string{"{", `{"version":2,"owner":"newer","network":"b","containerID":"w","ifName":"eth0","addresses":{"v4":[]}}`} {
		t.Run(content, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			path := filepath.Join(f.state, "attachments", "w", "b", "eth0")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, alloc := context.Background(), &Allocation{ID: "w", NetworkNames: []string{"b"}}
			unreadable := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ErrRecordUnreadable) || !strings.Contains(err.Error(), path) {
					t.Errorf("%s: %v, want ErrRecordUnreadable naming %s", what, err, path)
				}
			}
			_, err := f.c.Setup(ctx, alloc, "/x")
			unreadable("Setup", err)
			_, err = f.c.Connect(ctx, &Allocation{ID: "w"}, "b", "/x", ConnectOptions{IfName: "eth0"})
			unreadable("Connect as eth0", err)
			f.writeCacheIn(t, "b", "w", "/gone") // what the newer cninet's ADD cached
			unreadable("Teardown", f.c.Teardown(ctx, alloc, ""))
			unreadable("Disconnect", f.c.Disconnect(ctx, alloc, "b", ""))
			unreadable("Disconnect as eth0", f.c.Disconnect(ctx, alloc, "b", "", ConnectOptions{IfName: "eth0"}))
			report, err := f.c.GC(ctx, []string{})
			if err != nil || !slices.Equal(report.Unreadable(), []string{path}) || report.Len() != 0 {
				t.Errorf("GC: %v, unreadable %v, removed %v; want the file reported and nothing removed", err, report.Unreadable(), report.Removed())
			}
			if log := f.drv.log(); log != "" {
				t.Errorf("plugin commands %s, want none", log)
			}
			if raw, err := os.ReadFile(path); err != nil || !bytes.Equal(raw, []byte(content)) {
				t.Fatalf("the file after every operation: %q, %v; want %q kept", raw, err, content)
			}
			recs, err := f.c.Attachments()
			if !errors.Is(err, ErrIO) || len(recs) != 1 || recs[0].State != "unreadable" || !strings.Contains(recs[0].Unreadable, path) ||
				recs[0].ID != "w" || recs[0].Network != "b" || recs[0].IfName != "eth0" {
				t.Fatalf("Attachments: %+v, %v; want the file listed as unreadable", recs, err)
			}
		})
	}
}

// GC removes what killed processes leave in the registry: the temporary
// file of a write cut short, once stale, and the lock file of an id with
// no record (under its lock). A fresh temporary file, and the lock file
// of an id with a record, are another process's in use.
func TestGCRemovesWhatKilledProcessesLeftInTheRegistry(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	ctx := context.Background()
	if _, err := f.c.Connect(ctx, &Allocation{ID: "live-1"}, "b", "/x", ConnectOptions{IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{ // path → kept by GC
		filepath.Join(f.state, "tmp", "record-killed"):    false,
		filepath.Join(f.state, "tmp", "record-writing"):   true,
		filepath.Join(f.state, "locks", "id", "killed-1"): false,
		filepath.Join(f.state, "locks", "id", "live-1"):   true,
	}
	for path := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(f.state, "tmp", "record-killed"), old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.GC(ctx, []string{"live-1"}); err != nil {
		t.Fatal(err)
	}
	for path, kept := range files {
		if _, err := os.Stat(path); (err == nil) != kept {
			t.Errorf("%s after GC: %v, want kept: %v", path, err, kept)
		}
	}
}

func TestNewRefusesARelativeStateDir(t *testing.T) {
	_, err := New(Config{ConfList: []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"}]}`), StateDir: "var/lib/cninet"})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("New with a relative StateDir: %v, want ErrInvalidConfig asking for an absolute path", err)
	}
}

// Unrecorded lists what libcni's cache holds in the Configurator's
// networks that no record claims, saying whether its namespace is gone;
// Status reports them in its log.
func TestUnrecordedListsWhatNoRecordClaims(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	var log bytes.Buffer
	f.c.logger = hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Info})
	f.c.wire()
	ns := newLiveNamespace(t)
	if _, err := f.c.Connect(context.Background(), &Allocation{ID: "recorded-1"}, "b", ns.path, ConnectOptions{IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	f.writeCacheIn(t, "b", "tool-1", ns.path)
	f.writeCacheIn(t, "b", "tool-2", "/gone")
	f.writeCacheIn(t, "elsewhere", "tool-3", ns.path) // a network this Configurator does not know
	got, err := f.c.Unrecorded()
	want := []UnrecordedAttachment{
		{Network: "b", ID: "tool-1", IfName: "eth0", NetNS: ns.path},
		{Network: "b", ID: "tool-2", IfName: "eth0", NetNS: "/gone", NamespaceGone: true},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Unrecorded: %+v, %v; want %+v", got, err, want)
	}
	_ = f.c.Status(context.Background()) // not ready without plugins: what matters is the report
	if !strings.Contains(log.String(), "no record of the host registry claims") || !strings.Contains(log.String(), "tool-1") {
		t.Fatalf("Status's log lacks the unrecorded attachments:\n%s", log.String())
	}
}
