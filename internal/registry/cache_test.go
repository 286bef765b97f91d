package registry

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/identity"
)

// A RecordCache lists what All lists, decoding again only the files
// written since it last saw them.
func TestARecordCacheDecodesOnlyWhatChanged(t *testing.T) {
	later := func() time.Time { return time.Now().Add(time.Hour) } // every file settled
	marked := "marked by the test"                                 // an owner no file holds: proof the cache answered
	tests := []struct {
		name string
		// change changes the registry after a first read through the
		// cache, whose records of c1 and c2 the test then marks.
		change func(t *testing.T, g *Registry)
		now    func() time.Time
		// want is each listed id's owner after the second read.
		want map[string]string
	}{
		{
			name:   "a record whose file is as the last read found it is not decoded again",
			change: func(*testing.T, *Registry) {},
			now:    later,
			want:   map[string]string{"c1": marked, "c2": marked},
		},
		{
			name: "a record written again is decoded again",
			change: func(t *testing.T, g *Registry) {
				r := full("c2", "net1", "eth0")
				r.Owner = "nomad"
				mustPut(t, g, r)
			},
			now:  later,
			want: map[string]string{"c1": marked, "c2": "nomad"},
		},
		{
			name: "a record removed is no longer listed",
			change: func(t *testing.T, g *Registry) {
				mustRemove(t, g, identity.Key{Network: "net1", ID: "c2", IfName: "eth0"})
			},
			now:  later,
			want: map[string]string{"c1": marked},
		},
		{
			name: "a record added is listed",
			change: func(t *testing.T, g *Registry) {
				mustPut(t, g, full("c3", "net1", "eth0"))
			},
			now:  later,
			want: map[string]string{"c1": marked, "c2": marked, "c3": "kubelet"},
		},
		{
			name:   "a file written within the settling time of the read is decoded every time",
			change: func(*testing.T, *Registry) {},
			now:    time.Now,
			want:   map[string]string{"c1": "kubelet", "c2": "kubelet"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := open(t)
			mustPut(t, g, full("c1", "net1", "eth0"))
			mustPut(t, g, full("c2", "net1", "eth0"))
			var c RecordCache
			first, err := g.allCached(&c, tc.now())
			if err != nil || len(first.Records) != 2 {
				t.Fatalf("first read: %d records, %v", len(first.Records), err)
			}
			for _, kept := range c.files {
				kept.rec.Owner = marked
			}
			tc.change(t, g)
			got, err := g.allCached(&c, tc.now())
			if err != nil {
				t.Fatal(err)
			}
			owners := map[string]string{}
			for _, r := range got.Records {
				owners[r.ID] = r.Owner
			}
			if !reflect.DeepEqual(owners, tc.want) {
				t.Fatalf("owners after the second read %v, want %v", owners, tc.want)
			}
			if len(c.files) > len(tc.want) {
				t.Fatalf("the cache keeps %d files for %d records: a removed one is not forgotten", len(c.files), len(tc.want))
			}
		})
	}
}

// What AllCached lists is what All lists, damaged files included, on
// the first read and on one served from the cache.
func TestAllCachedListsWhatAllLists(t *testing.T) {
	g := open(t)
	writeRecords(t, g, 12)
	damaged := g.path(identity.Key{Network: "net0", ID: "c99999", IfName: "eth0"})
	if err := os.MkdirAll(filepath.Dir(damaged), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(damaged, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := g.All()
	if err != nil || len(want.Records) != 12 || len(want.Damaged) != 1 {
		t.Fatalf("All: %d records, %d damaged, %v", len(want.Records), len(want.Damaged), err)
	}
	var c RecordCache
	for i := range 2 {
		got, err := g.allCached(&c, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Records, want.Records) || len(got.Damaged) != 1 || got.Damaged[0].Path != want.Damaged[0].Path {
			t.Fatalf("read %d through the cache: %d records, damaged %v; want All's %d, %v", i, len(got.Records), got.Damaged, len(want.Records), want.Damaged)
		}
	}
}

func mustRemove(t testing.TB, g *Registry, k identity.Key) {
	t.Helper()
	if err := g.Remove(k); err != nil {
		t.Fatalf("Remove(%s): %v", k, err)
	}
}

// BenchmarkAllCached10000 is All through a cache none of whose records
// changed: the repair watcher's read of a quiet host (BenchmarkAll10000
// is the same read without it).
func BenchmarkAllCached10000(b *testing.B) {
	g := open(b)
	writeRecords(b, g, 10_000)
	var c RecordCache
	later := time.Now().Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		all, err := g.allCached(&c, later)
		if err != nil || len(all.Records) != 10_000 {
			b.Fatalf("AllCached: %d records, %v", len(all.Records), err)
		}
	}
}
