package cninet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/registry"
)

// setUpAs sets allocation id up with c on the fixture's network (the
// fake returns 198.18.0.2) and plants what the plugins would have left.
func (cf cleanupFixture) setUpAs(t *testing.T, c *cninet.Configurator, id string) {
	t.Helper()
	if _, err := c.Setup(context.Background(), &cninet.Allocation{ID: id}, filepath.Join(t.TempDir(), "netns")); err != nil {
		t.Fatal(err)
	}
	cf.leak(t, footprint{network: cf.network, id: id, ip: "198.18.0.2"})
}

func TestGCCollectsOnlyItsOwnOwnersAttachments(t *testing.T) {
	tests := []struct {
		name      string
		gcOwner   string
		wantKept  bool
		wantItems bool
	}{
		{"another owner's GC leaves a live attachment whole, though its live set does not name it", "runtime-b", true, false},
		{"the same owner's GC collects the attachment its live set does not name", "runtime-a", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cf := newCleanupFixture(t, "nomad")
			before := cf.state()
			cf.setUpAs(t, cf.configurator(t, "runtime-a"), "a1")
			live := cf.state()
			report, err := cf.configurator(t, tt.gcOwner).GC(context.Background(), []string{})
			if err != nil {
				t.Fatal(err)
			}
			reserved := strings.Join(cf.reservations(t), ",")
			switch after := cf.state(); {
			case tt.wantKept && (after != live || !strings.Contains(reserved, "198.18.0.2")):
				t.Fatalf("a1's state changed (reservations %s):\nbefore:\n%s\nafter:\n%s", reserved, live, after)
			case !tt.wantKept && (after != before || strings.Contains(reserved, "198.18.0.2")):
				t.Fatalf("a1's state left (reservations %s):\n%s", reserved, after)
			}
			if got := report.Count(cninet.GCRecordedAttachment) > 0; got != tt.wantItems {
				t.Errorf("report has recorded attachments %v, want %v: %+v", got, tt.wantItems, report.Removed())
			}
			recs, _ := cf.configurator(t, "runtime-a").Attachments()
			if kept := len(recs) == 1 && recs[0].Owner == "runtime-a"; kept != tt.wantKept {
				t.Errorf("records after GC: %+v, want a1's kept %v", recs, tt.wantKept)
			}
		})
	}
}

// The firewall plugin's rules name no attachment, only its address: after
// host-local's DEL erased the reservation, and with no cached result, the
// host registry's record is the only proof that the address was a1's.
func TestTeardownFinishesFromTheRecordAfterTheDELErasedEveryOtherProof(t *testing.T) {
	tests := []struct {
		name        string
		keepRecords bool
		wantRemoved bool
	}{
		{"with the record, a restarted runner's Teardown removes the firewall rules", true, true},
		{"without it (the positive control), nothing proves the address and the rules stay", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cf := newCleanupFixture(t, "nomad")
			before := cf.state()
			a := cf.configurator(t, "runtime-a")
			if _, err := a.Setup(context.Background(), &cninet.Allocation{ID: "a1"}, filepath.Join(t.TempDir(), "netns")); err != nil {
				t.Fatal(err)
			}
			fp := footprint{network: "nomad", id: "a1", ip: "198.18.0.2"}
			cf.v4.Load("filter", fp.filter()) // the DEL ran up to the firewall plugin's share, then the runner was killed
			if !tt.keepRecords {
				if err := os.RemoveAll(filepath.Join(cf.stateDir, "attachments")); err != nil {
					t.Fatal(err)
				}
			}
			restarted := cf.configurator(t, "runtime-a")
			if err := restarted.Teardown(context.Background(), &cninet.Allocation{ID: "a1"}, ""); err != nil {
				t.Fatal(err)
			}
			if removed := cf.state() == before; removed != tt.wantRemoved {
				t.Fatalf("firewall rules removed %v, want %v:\n%s", removed, tt.wantRemoved, cf.v4.Save("filter"))
			}
			if recs, err := restarted.Attachments(); err != nil || len(recs) != 0 {
				t.Errorf("records after Teardown: %+v (%v), want none", recs, err)
			}
		})
	}
}

func TestADamagedRecordIsKeptAndItsIDIsNeverCollected(t *testing.T) {
	for _, content := range []string{"{not json", `{"version": 99, "owner": "future"}`} {
		t.Run(content, func(t *testing.T) {
			cf := newCleanupFixture(t, "nomad")
			cf.leak(t, footprint{network: "nomad", id: "x1", ip: "198.18.0.9"})
			path := filepath.Join(cf.stateDir, "attachments", "x1", "nomad", "eth0")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			before := cf.state()
			if _, err := cf.c.GC(context.Background(), []string{}); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, []byte(content)) {
				t.Fatalf("damaged record now %q (%v), want it kept byte for byte", got, err)
			}
			if cf.state() != before {
				t.Fatalf("x1's rules changed though a record nobody can read names it:\n%s", cf.state())
			}
			if _, err := cf.c.Attachments(); !errors.Is(err, cninet.ErrIO) || !strings.Contains(err.Error(), path) {
				t.Errorf("Attachments error %v, want ErrIO naming %s", err, path)
			}
		})
	}
}

func TestAnOperationWaitsForTheLockAnotherProcessHolds(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.setUpAs(t, cf.c, "a1")
	before := cf.state()
	reg, err := registry.Open(cf.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := reg.LockID(context.Background(), "a1") // as another process would: its own open file
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := cf.c.Teardown(ctx, &cninet.Allocation{ID: "a1"}, ""); !errors.Is(err, cninet.ErrBusy) {
		t.Fatalf("Teardown while another holds the lock: %v, want ErrBusy", err)
	}
	if cf.state() != before {
		t.Fatal("a Teardown that never got the lock changed the host")
	}
	unlock()
	if err := cf.c.Teardown(context.Background(), &cninet.Allocation{ID: "a1"}, ""); err != nil {
		t.Fatalf("Teardown once the lock is free: %v", err)
	}
	if cf.state() == before {
		t.Fatal("Teardown with the lock removed nothing")
	}
}

func TestNoADDRunsWhileAGCHoldsTheHostsGCLock(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	reg, err := registry.Open(cf.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := reg.LockGC(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = cf.c.Setup(ctx, &cninet.Allocation{ID: "a1"}, filepath.Join(t.TempDir(), "netns"))
	if !errors.Is(err, cninet.ErrBusy) || len(cf.cni.Calls()) != 0 {
		t.Fatalf("Setup during another process's GC: %v, plugin calls %v; want ErrBusy and none", err, cf.cni.Calls())
	}
	if _, err := cf.c.GC(ctx, []string{}); !errors.Is(err, cninet.ErrBusy) {
		t.Fatalf("GC during another process's GC: %v, want ErrBusy", err)
	}
	unlock()
	if _, err := cf.c.Setup(context.Background(), &cninet.Allocation{ID: "a1"}, filepath.Join(t.TempDir(), "netns")); err != nil {
		t.Fatalf("Setup once the GC lock is free: %v", err)
	}
}

func TestAttachmentsListsTheRegistry(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	a := cf.configurator(t, "runtime-a")
	alloc := &cninet.Allocation{ID: "a1", Ports: []cninet.Port{{Label: "http", Value: 28080, To: 8080}}}
	if _, err := a.Setup(context.Background(), alloc, filepath.Join(t.TempDir(), "netns")); err != nil {
		t.Fatal(err)
	}
	recs, err := cf.configurator(t, "runtime-b").Attachments() // any owner's Configurator lists every record
	if err != nil || len(recs) != 1 {
		t.Fatalf("Attachments = %+v, %v; want a1's record", recs, err)
	}
	r := recs[0]
	if r.Owner != "runtime-a" || r.Network != "nomad" || r.ID != "a1" || r.IfName != "eth0" || r.State != "attached" ||
		len(r.Addresses) != 1 || r.Addresses[0].String() != "198.18.0.2" || len(r.Ports) != 2 || r.Ports[0].HostPort != 28080 || r.Since.IsZero() {
		t.Errorf("record %+v", r)
	}
}

func TestAttachmentsOfIDsListsOnlyThoseIDs(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	for _, id := range []string{"a1", "a2", "a3"} {
		if _, err := cf.c.Setup(context.Background(), &cninet.Allocation{ID: id}, filepath.Join(t.TempDir(), "netns")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		ids  []string
		want string
	}{
		{"the ids given, in their order", []string{"a3", "a1"}, "a3,a1"},
		{"an id given twice is listed once", []string{"a2", "a2"}, "a2"},
		{"an id without records lists nothing", []string{"a9"}, ""},
		{"no id lists every record", nil, "a1,a2,a3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := cf.c.Attachments(tc.ids...)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				got = append(got, r.ID)
			}
			if strings.Join(got, ",") != tc.want {
				t.Fatalf("Attachments(%q) lists %q, want %q", tc.ids, got, tc.want)
			}
		})
	}
	if _, err := cf.c.Attachments("a1", "../a2"); !errors.Is(err, cninet.ErrInvalidAllocation) || !strings.Contains(err.Error(), "../a2") {
		t.Fatalf("Attachments of a path: %v, want ErrInvalidAllocation naming it", err)
	}
}

// One Configurator serving several owners (as cninet daemon serves each
// runtime): WithOwner says whose an operation's attachments are.
func TestWithOwnerMakesEachOperationsAttachmentsItsOwners(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	ctxA := cninet.WithOwner(context.Background(), "runtime-a")
	if _, err := cf.c.Setup(ctxA, &cninet.Allocation{ID: "a1"}, filepath.Join(t.TempDir(), "netns")); err != nil {
		t.Fatal(err)
	}
	cf.leak(t, footprint{network: "nomad", id: "a1", ip: "198.18.0.2"})
	live := cf.state()
	if recs, _ := cf.c.Attachments(); len(recs) != 1 || recs[0].Owner != "runtime-a" {
		t.Fatalf("records %+v, want a1 as runtime-a's", recs)
	}
	if _, err := cf.c.GC(cninet.WithOwner(context.Background(), "runtime-b"), []string{}); err != nil {
		t.Fatal(err)
	}
	if cf.state() != live {
		t.Fatalf("runtime-b's GC took runtime-a's attachment:\n%s", cf.state())
	}
	if _, err := cf.c.GC(ctxA, []string{}); err != nil {
		t.Fatal(err)
	}
	if cf.state() == live {
		t.Fatal("runtime-a's own GC left its dead attachment")
	}
}

func TestCachedInterfacesListsAContainersInterfacesInANetwork(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	results := filepath.Join(cf.cacheDir, "results")
	if err := os.MkdirAll(results, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, a := range [][3]string{{"nomad", "c1", "eth1"}, {"nomad", "c1", "eth0"}, {"other", "c1", "eth2"}, {"nomad", "c10", "eth0"}} {
		body := fmt.Sprintf(`{"kind":"cniCacheV1","containerId":%q,"ifName":%q,"networkName":%q,"config":"e30="}`, a[1], a[2], a[0])
		if err := os.WriteFile(filepath.Join(results, a[0]+"-"+a[1]+"-"+a[2]), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, id, network, want string }{
		{"every interface of the container in the network, sorted", "c1", "nomad", "eth0,eth1"},
		{"another network's are not listed", "c1", "other", "eth2"},
		{"a container whose id begins alike is another", "c10", "nomad", "eth0"},
		{"none of a container the cache does not know", "c2", "nomad", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cf.c.CachedInterfaces(tc.id, tc.network)
			if err != nil || strings.Join(got, ",") != tc.want {
				t.Fatalf("CachedInterfaces(%q, %q) = %q, %v; want %q", tc.id, tc.network, got, err, tc.want)
			}
		})
	}
	if _, err := cf.c.CachedInterfaces("../c1", "nomad"); !errors.Is(err, cninet.ErrInvalidAllocation) {
		t.Fatalf("CachedInterfaces of a path: %v, want ErrInvalidAllocation", err)
	}
}
