package cninet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/registry"
)

func TestTeardownWithTheOriginalAllocationDetachesConnectedNetworksToo(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", Ports: []Port{{Value: 8080}}, NetworkNames: []string{"b"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	withPorts := &Allocation{ID: "w", Ports: []Port{{Value: 9090}}, NetworkNames: []string{"b"}}
	if _, err := f.c.Connect(context.Background(), withPorts, "c", "/x"); err != nil {
		t.Fatal(err)
	}
	f.leakMasquerade("c", "w", "198.18.2.7")
	// The fake driver writes no plugin's rules: every attachment Check
	// looks at is drift, named by network and interface.
	if got := checkedAttachments(f.c.Check(context.Background(), alloc, "/x")); got != "b/eth0 c/eth1" {
		t.Fatalf("Check looked at %q: want the connected network checked too", got)
	}
	if err := f.c.Teardown(context.Background(), alloc, ""); err != nil {
		t.Fatal(err)
	}
	del := f.drv.find("DEL", "c")
	if del.ifName != "eth1" || len(del.mappings) != 2 || del.mappings[0].HostPort != 9090 {
		t.Fatalf("DEL of the connected network %+v: want eth1 with the port mappings it was connected with", del)
	}
	if f.hasMasquerade("c", "w") || len(f.cached(t)) != 0 {
		t.Fatalf("left after Teardown: masquerade of c %v, cache %v", f.hasMasquerade("c", "w"), f.cached(t))
	}
	if err := f.c.Teardown(context.Background(), alloc, ""); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
}

func TestAfterDisconnectTheAllocationMayStillNameTheNetwork(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "b", "c"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Disconnect(context.Background(), alloc, "b", "/x"); err != nil {
		t.Fatal(err)
	}
	if got := checkedAttachments(f.c.Check(context.Background(), alloc, "/x")); got != "a/eth0 c/eth2" {
		t.Fatalf("Check looked at %q: want c checked and the disconnected b not", got)
	}
	st, err := f.c.Connect(context.Background(), alloc, "b", "/x")
	if err != nil || st.IfName != "eth1" {
		t.Fatalf("connecting b again: %+v, %v; want it back on eth1", st, err)
	}
	if err := f.c.Teardown(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if got, want := f.drv.byNetwork()["b"], "ADD eth1, DEL eth1, ADD eth1, DEL eth1"; got != want {
		t.Fatalf("calls of b: %q, want %q", got, want)
	}
	if len(f.cached(t)) != 0 {
		t.Fatalf("cache after Teardown: %v", f.cached(t))
	}
}

// A Disconnect or Teardown killed after a network's DEL removed libcni's
// cached result, before its force cleanup, leaves only the intent record
// of that network: the next Teardown finds the network by it and
// finishes, even though the Allocation does not name it.
func TestTeardownFinishesANetworkOnlyAnIntentRecordStillNames(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	record := filepath.Join(f.cache, "cninet", "withheld", "b", "w")
	if err := os.MkdirAll(filepath.Dir(record), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(record, []byte(`{"network":"b","id":"w","ifName":"eth1","addresses":["198.18.1.7"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Teardown(context.Background(), &Allocation{ID: "w", NetworkNames: []string{"a"}}, ""); err != nil {
		t.Fatal(err)
	}
	if got := f.drv.byNetwork(); got["b"] != "DEL eth1" {
		t.Errorf("driver calls %v, want b's DEL on the interface its record names", got)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Errorf("the intent record is still there: %v", err)
	}
}

// An attachment is settled (its ADD returned: the cleanup after its DEL
// may look up by handle what its prevention saw) when its record says
// attached (or, with no record of it, libcni's cache holds it); never
// while its record says adding or detaching.
func TestAFoundAttachmentIsSettledOnlyOnceItsADDReturned(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state registry.State // "": the record removed
		want  bool
	}{
		{"recorded attached", registry.Attached, true},
		{"recorded adding: a plugin may still be writing", registry.Adding, false},
		{"recorded detaching", registry.Detaching, false},
		{"no record, and no cached result the finder sees: nothing shows the ADD returned", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			alloc := &Allocation{ID: "w", Ports: []Port{{Value: 8080}}}
			if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
				t.Fatal(err)
			}
			req, err := newRequest(alloc, false)
			if err != nil {
				t.Fatal(err)
			}
			owner := f.c.owners.OwnerOf(context.Background())
			rec := f.c.registry.Recorded("w", "a", "eth0")
			if rec == nil {
				t.Fatal("Setup left no record of w on a")
			}
			if tc.state == "" {
				err = f.c.registry.Store.Remove(rec.Key)
			} else {
				rec.State = tc.state
				err = f.c.registry.Store.Put(rec)
			}
			if err != nil {
				t.Fatal(err)
			}
			found, _, err := f.c.find.Of(req, owner, true)
			if err != nil {
				t.Fatal(err)
			}
			at := slices.IndexFunc(found, func(fa attachments.Found) bool { return fa.Att.Name() == "a" })
			if at < 0 || found[at].Settled != tc.want {
				t.Fatalf("found %d attachments, a at %d (settled %v); want a found with settled %v", len(found), at, at >= 0 && found[at].Settled, tc.want)
			}
		})
	}
}

// checkedAttachments names the attachments a Check of attachments whose
// plugins wrote nothing (the fake driver's) found drift in, as
// "network/ifname", sorted.
func checkedAttachments(err error) string {
	de := asDriftError(err)
	if de == nil {
		return fmt.Sprintf("no drift: %v", err)
	}
	var out []string
	for _, d := range de.Drifts {
		out = append(out, d.Network+"/"+d.IfName)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
