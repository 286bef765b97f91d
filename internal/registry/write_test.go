package registry

import (
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/identity"
)

// armCrash makes the k-th step of the next writes (counting from 1) fail
// as a kill would, and records the name of every step reached.
func armCrash(t *testing.T, k int) (reached *[]string) {
	t.Helper()
	var names []string
	crashAt = func(name string) error {
		names = append(names, name)
		if len(names) == k {
			return errors.New("killed")
		}
		return nil
	}
	t.Cleanup(func() { crashAt = nil })
	return &names
}

// TestKillAtEachWriteStep kills a Put or a Remove at each of its steps
// in turn (the k-th step for every k until one runs to its end): a fresh
// read then sees the old record or the whole new one, never an error, a
// partial record or none where the old one was; a killed write leaves
// files only in tmp/, which RemoveStaleTemps removes once stale; and the
// operation, run again, completes.
func TestKillAtEachWriteStep(t *testing.T) {
	key := identity.Key{Network: "net1", ID: "c1", IfName: "eth0"}
	old := func() *Record { r := full("c1", "net1", "eth0"); r.State = Adding; return r }
	updated := func() *Record {
		r := full("c1", "net1", "eth0")
		r.State = Attached
		r.AddAddresses(netip.MustParseAddr("10.88.0.3"))
		return r
	}
	sibling := full("c1", "net2", "eth0")

	type outcome int
	const (
		none outcome = iota // no record of the key
		oldRec
		newRec
	)
	cases := []struct {
		name      string
		setup     []*Record // written before, without crashes
		op        func(g *Registry) error
		steps     []string  // the steps it must reach, in order
		afterKill []outcome // what a read sees after a kill at each step
		done      outcome   // after the operation ran to its end
	}{
		{
			name:      "a first Put",
			op:        func(g *Registry) error { return g.Put(updated()) },
			steps:     []string{"sync new dir", "sync new dir", "sync new dir", "sync new dir", "write", "sync", "rename", "sync dir"},
			afterKill: []outcome{none, none, none, none, none, none, none, newRec},
			done:      newRec,
		},
		{
			name:      "a first Put on a network new to an id",
			setup:     []*Record{sibling},
			op:        func(g *Registry) error { return g.Put(updated()) },
			steps:     []string{"sync new dir", "write", "sync", "rename", "sync dir"},
			afterKill: []outcome{none, none, none, none, newRec},
			done:      newRec,
		},
		{
			name:      "a Put that replaces a record",
			setup:     []*Record{old(), sibling},
			op:        func(g *Registry) error { return g.Put(updated()) },
			steps:     []string{"write", "sync", "rename", "sync dir"},
			afterKill: []outcome{oldRec, oldRec, oldRec, newRec},
			done:      newRec,
		},
		{
			name:      "a Remove",
			setup:     []*Record{old(), sibling},
			op:        func(g *Registry) error { return g.Remove(key) },
			steps:     []string{"remove", "unlinked", "unlinked dir"},
			afterKill: []outcome{oldRec, none, none},
			done:      none,
		},
		{
			name:      "a Remove of an id's last record",
			setup:     []*Record{old()},
			op:        func(g *Registry) error { return g.Remove(key) },
			steps:     []string{"remove", "unlinked", "unlinked dir", "unlinked dir"},
			afterKill: []outcome{oldRec, none, none, none},
			done:      none,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k := 1; ; k++ {
				g := open(t)
				var oldSince time.Time
				for _, r := range c.setup {
					mustPut(t, g, r)
					if r.Key == key {
						oldSince = r.Since
					}
				}
				reached := armCrash(t, k)
				err := c.op(g)
				crashAt = nil
				if len(*reached) < k {
					// The operation ran to its end: k-1 steps were all.
					if err != nil {
						t.Fatalf("uncrashed: %v", err)
					}
					if !reflect.DeepEqual(*reached, c.steps) {
						t.Fatalf("steps reached %q, want %q", *reached, c.steps)
					}
					checkOutcome(t, g, "uncrashed", key, c.done == newRec, c.done != none, sibling, c.setup)
					break
				}
				at := (*reached)[k-1]
				if !errors.Is(err, errCrashed) {
					t.Fatalf("killed at step %d (%s): returned %v, want errCrashed", k, at, err)
				}
				if k > len(c.afterKill) {
					t.Fatalf("killed at step %d (%s): more steps than %q", k, at, c.steps)
				}
				want := c.afterKill[k-1]
				how := "killed at " + at
				rec := checkOutcome(t, g, how, key, want == newRec, want != none, sibling, c.setup)
				if want == oldRec && !rec.Since.Equal(oldSince) {
					t.Fatalf("%s: since %v, want the old record's %v", how, rec.Since, oldSince)
				}

				// Only tmp/ holds what the kill left; stale, it goes.
				temps := checkOnlyTempsInTmp(t, g, how)
				// A kill runs no cleanup: a temp file written and not yet
				// renamed stays, for RemoveStaleTemps.
				if wantTemp := at == "write" || at == "sync" || at == "rename"; wantTemp != (len(temps) == 1) {
					t.Fatalf("%s: temp files %q, want one: %v", how, temps, wantTemp)
				}
				if len(temps) > 0 {
					g.RemoveStaleTemps()
					if left := checkOnlyTempsInTmp(t, g, how); len(left) != len(temps) {
						t.Fatalf("%s: RemoveStaleTemps removed fresh temp files %q", how, temps)
					}
					then := time.Now().Add(-staleTempAge - time.Minute)
					for _, p := range temps {
						if err := os.Chtimes(p, then, then); err != nil {
							t.Fatal(err)
						}
					}
					g.RemoveStaleTemps()
					if left := checkOnlyTempsInTmp(t, g, how); len(left) != 0 {
						t.Fatalf("%s: stale temp files left: %q", how, left)
					}
				}

				// A restarted process runs the operation again, to its end.
				if err := c.op(g); err != nil {
					t.Fatalf("%s: run again: %v", how, err)
				}
				checkOutcome(t, g, how+", then run again", key, c.done == newRec, c.done != none, sibling, c.setup)
				if left := checkOnlyTempsInTmp(t, g, how); len(left) != 0 {
					t.Fatalf("%s, then run again: temp files left: %q", how, left)
				}
			}
		})
	}
}

// checkOutcome reads the registry afresh, through All and Of, and checks
// that key's record is there or not, and whole (old or new), and that the
// sibling, when set up, is intact.
func checkOutcome(t *testing.T, g *Registry, how string, key identity.Key, isNew, present bool, sibling *Record, setup []*Record) Record {
	t.Helper()
	all, err := g.All()
	if err != nil || len(all.Damaged) != 0 {
		t.Fatalf("%s: All: %v, damaged %v", how, err, all.Damaged)
	}
	recs, damaged, err := g.Of(key.ID)
	if err != nil || len(damaged) != 0 {
		t.Fatalf("%s: Of: %v, damaged %v", how, err, damaged)
	}
	if !reflect.DeepEqual(recs, all.Records) {
		t.Fatalf("%s: Of and All disagree: %v, %v", how, keysOf(recs), keysOf(all.Records))
	}
	var got *Record
	var others []identity.Key
	for i := range recs {
		if recs[i].Key == key {
			got = &recs[i]
		} else {
			others = append(others, recs[i].Key)
		}
	}
	var wantOthers []identity.Key
	for _, r := range setup {
		if r.Key != key {
			wantOthers = append(wantOthers, r.Key)
		}
	}
	if !reflect.DeepEqual(others, wantOthers) {
		t.Fatalf("%s: other records %v, want %v", how, others, wantOthers)
	}
	if !present {
		if got != nil {
			t.Fatalf("%s: %s is recorded, want no record", how, key)
		}
		return Record{}
	}
	if got == nil {
		t.Fatalf("%s: %s has no record, want the %s one", how, key, map[bool]string{true: "new", false: "old"}[isNew])
	}
	wantState, wantAddrs := Adding, 2
	if isNew {
		wantState, wantAddrs = Attached, 3
	}
	if got.State != wantState || len(got.Addresses) != wantAddrs || got.Version != FormatVersion ||
		got.Owner != "kubelet" || len(got.ConfList) == 0 || len(got.Plugins) != 2 {
		t.Fatalf("%s: record %+v, want the %s one whole", how, *got, map[bool]string{true: "new", false: "old"}[isNew])
	}
	if sibling != nil {
		for _, r := range recs {
			if r.Key == sibling.Key && !reflect.DeepEqual(r, *sibling) {
				t.Fatalf("%s: sibling changed: %+v", how, r)
			}
		}
	}
	return *got
}

// checkOnlyTempsInTmp checks that every file of the state directory is a
// record in attachments/ or a temp file in tmp/, and returns the latter.
func checkOnlyTempsInTmp(t *testing.T, g *Registry, how string) []string {
	t.Helper()
	var temps []string
	err := filepath.WalkDir(g.Dir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(g.Dir(), path)
		switch parts := strings.Split(rel, string(filepath.Separator)); {
		case parts[0] == "tmp" && len(parts) == 2:
			temps = append(temps, path)
		case parts[0] == "attachments" && len(parts) == 4:
			if _, err := readRecord(path, identity.Key{Network: parts[2], ID: parts[1], IfName: parts[3]}); err != nil {
				t.Errorf("%s: %s is no whole record: %v", how, rel, err)
			}
		default:
			t.Errorf("%s: stray file %s", how, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return temps
}
