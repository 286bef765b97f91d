package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// open is Open on a fresh temporary state directory.
func open(t testing.TB) *Registry {
	t.Helper()
	g, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// full is a record with every field set, the conflist with white space
// that must survive byte for byte.
func full(id, network, ifName string) *Record {
	return &Record{
		Owner:     "kubelet",
		Key:       identity.Key{Network: network, ID: id, IfName: ifName},
		RuntimeID: "runtime-" + id,
		NetNS:     "/var/run/netns/" + id,
		State:     Attached,
		Addresses: []netip.Addr{netip.MustParseAddr("10.88.0.2"), netip.MustParseAddr("fd00::2")},
		Args:      [][2]string{{"K8S_POD_NAME", "web-0"}, {"IgnoreUnknown", "1"}},
		Capabilities: map[string]json.RawMessage{
			"portMappings": json.RawMessage(`[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]`),
			"bandwidth":    json.RawMessage(`{"ingressRate":1000}`),
		},
		ConfList: []byte("{\n  \"cniVersion\": \"1.0.0\",\t\"name\": \"" + network + "\",\r\n  \"plugins\": [ ]\n}\n\n"),
		Plugins:  []Plugin{{Type: "bridge"}, {Type: "portmap", Backend: "nftables"}},
	}
}

func mustPut(t testing.TB, g *Registry, r *Record) {
	t.Helper()
	if err := g.Put(r); err != nil {
		t.Fatalf("Put(%s): %v", r.Key, err)
	}
}

func keysOf[R interface{ Record | Summary }](recs []R) []identity.Key {
	keys := make([]identity.Key, 0, len(recs))
	for _, r := range recs {
		switch r := any(r).(type) {
		case Record:
			keys = append(keys, r.Key)
		case Summary:
			keys = append(keys, r.Key)
		}
	}
	return keys
}

// files lists every file and directory under dir, relative, with the
// content of each file.
func files(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			out[rel+"/"] = ""
			return nil
		}
		raw, err := os.ReadFile(path)
		out[rel] = string(raw)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	t.Run("every field of a record survives Put then Of and All", func(t *testing.T) {
		g := open(t)
		want := full("c1", "net1", "eth0")
		mustPut(t, g, want)
		if want.Version != FormatVersion || want.Since.IsZero() || !want.Updated.Equal(want.Since) {
			t.Fatalf("Put set version %d, since %v, updated %v", want.Version, want.Since, want.Updated)
		}
		if p := filepath.Join(g.Dir(), "attachments", "c1", "net1", "eth0"); want.Path() != p {
			t.Fatalf("Path() = %q, want %q", want.Path(), p)
		}
		recs, damaged, err := g.Of("c1")
		if err != nil || len(damaged) != 0 || len(recs) != 1 {
			t.Fatalf("Of = %v, %v, %v; want one record", recs, damaged, err)
		}
		if !reflect.DeepEqual(recs[0], *want) {
			t.Fatalf("Of returned\n%+v\nwant\n%+v", recs[0], *want)
		}
		if !bytes.Equal(recs[0].ConfList, full("c1", "net1", "eth0").ConfList) {
			t.Fatalf("conflist bytes changed: %q", recs[0].ConfList)
		}
		all, err := g.All()
		if err != nil || len(all.Damaged) != 0 || len(all.Records) != 1 || !reflect.DeepEqual(all.Records[0], *want) {
			t.Fatalf("All = %+v, %v; want the one record", all, err)
		}
	})

	t.Run("capabilities stay the same JSON values", func(t *testing.T) {
		g := open(t)
		r := full("c1", "net1", "eth0")
		r.Capabilities = map[string]json.RawMessage{"portMappings": json.RawMessage("[ {\"hostPort\": 8080,\n \"hostIP\": \"<any>\"} ]")}
		mustPut(t, g, r)
		recs, _, _ := g.Of("c1")
		var got, want any
		if err := json.Unmarshal(recs[0].Capabilities["portMappings"], &got); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(r.Capabilities["portMappings"], &want)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("capabilities %s, want %s", recs[0].Capabilities["portMappings"], r.Capabilities["portMappings"])
		}
	})

	t.Run("a second Put keeps Since, advances Updated and replaces the fields", func(t *testing.T) {
		g := open(t)
		first := full("c1", "net1", "eth0")
		first.State = Adding
		mustPut(t, g, first)
		recs, _, _ := g.Of("c1")
		again := recs[0]
		again.State = Detaching
		again.AddAddresses(netip.MustParseAddr("10.88.0.9"))
		time.Sleep(2 * time.Millisecond)
		mustPut(t, g, &again)
		recs, _, _ = g.Of("c1")
		got := recs[0]
		switch {
		case !got.Since.Equal(first.Since):
			t.Fatalf("Since %v, want the first Put's %v", got.Since, first.Since)
		case !got.Updated.After(first.Updated):
			t.Fatalf("Updated %v, not after the first Put's %v", got.Updated, first.Updated)
		case got.State != Detaching || len(got.Addresses) != 3:
			t.Fatalf("the second Put's fields were not kept: %+v", got)
		}
	})

	t.Run("a Put of a record built afresh keeps the recorded Since", func(t *testing.T) {
		g := open(t)
		first := full("c1", "net1", "eth0")
		mustPut(t, g, first)
		time.Sleep(2 * time.Millisecond)
		fresh := full("c1", "net1", "eth0")
		mustPut(t, g, fresh)
		recs, _, _ := g.Of("c1")
		if !recs[0].Since.Equal(first.Since) || !fresh.Since.Equal(first.Since) {
			t.Fatalf("Since %v (record) %v (argument), want the first Put's %v", recs[0].Since, fresh.Since, first.Since)
		}
		if !recs[0].Updated.After(first.Updated) {
			t.Fatalf("Updated %v, not after the first Put's %v", recs[0].Updated, first.Updated)
		}
	})

	t.Run("All and Of return records sorted by id, network, interface", func(t *testing.T) {
		g := open(t)
		for _, k := range []identity.Key{
			{Network: "net2", ID: "b", IfName: "eth1"}, {Network: "net1", ID: "b", IfName: "eth0"}, {Network: "net2", ID: "a", IfName: "eth0"},
			{Network: "net1", ID: "a", IfName: "eth1"}, {Network: "net1", ID: "a", IfName: "eth0"}, {Network: "net2", ID: "b", IfName: "eth0"},
		} {
			mustPut(t, g, full(k.ID, k.Network, k.IfName))
		}
		all, err := g.All()
		if err != nil {
			t.Fatal(err)
		}
		want := []identity.Key{
			{Network: "net1", ID: "a", IfName: "eth0"}, {Network: "net1", ID: "a", IfName: "eth1"}, {Network: "net2", ID: "a", IfName: "eth0"},
			{Network: "net1", ID: "b", IfName: "eth0"}, {Network: "net2", ID: "b", IfName: "eth0"}, {Network: "net2", ID: "b", IfName: "eth1"},
		}
		if got := keysOf(all.Records); !reflect.DeepEqual(got, want) {
			t.Fatalf("All in order %v, want %v", got, want)
		}
		recs, _, _ := g.Of("b")
		if got := keysOf(recs); !reflect.DeepEqual(got, want[3:]) {
			t.Fatalf("Of(b) in order %v, want %v", got, want[3:])
		}
	})

	t.Run("a registry never written to lists nothing, no error", func(t *testing.T) {
		g := open(t)
		all, err := g.All()
		if err != nil || len(all.Records) != 0 || len(all.Damaged) != 0 {
			t.Fatalf("All = %+v, %v", all, err)
		}
		recs, damaged, err := g.Of("c1")
		if err != nil || len(recs) != 0 || len(damaged) != 0 {
			t.Fatalf("Of = %v, %v, %v", recs, damaged, err)
		}
		g.RemoveStaleTemps()
		if err := g.Remove(identity.Key{Network: "net1", ID: "c1", IfName: "eth0"}); err != nil {
			t.Fatalf("Remove: %v", err)
		}
	})

	t.Run("Of an id without records is empty, no error", func(t *testing.T) {
		g := open(t)
		mustPut(t, g, full("c1", "net1", "eth0"))
		recs, damaged, err := g.Of("c2")
		if err != nil || len(recs) != 0 || len(damaged) != 0 {
			t.Fatalf("Of(c2) = %v, %v, %v", recs, damaged, err)
		}
	})

	t.Run("Remove of a record that is not there is no error", func(t *testing.T) {
		g := open(t)
		if err := g.Remove(identity.Key{Network: "net1", ID: "c1", IfName: "eth0"}); err != nil {
			t.Fatalf("Remove of a missing record: %v", err)
		}
		mustPut(t, g, full("c1", "net1", "eth0"))
		for i := range 2 {
			if err := g.Remove(identity.Key{Network: "net1", ID: "c1", IfName: "eth0"}); err != nil {
				t.Fatalf("Remove #%d: %v", i+1, err)
			}
		}
	})

	t.Run("Remove drops empty directories and keeps sibling records", func(t *testing.T) {
		g := open(t)
		for _, k := range []identity.Key{{Network: "net1", ID: "c1", IfName: "eth0"}, {Network: "net1", ID: "c1", IfName: "eth1"}, {Network: "net2", ID: "c1", IfName: "eth0"}} {
			mustPut(t, g, full(k.ID, k.Network, k.IfName))
		}
		att := filepath.Join(g.Dir(), "attachments")
		exists := func(rel string) bool {
			_, err := os.Stat(filepath.Join(att, rel))
			return err == nil
		}
		steps := []struct {
			remove     identity.Key
			left       []identity.Key
			gone, kept []string
		}{
			{identity.Key{Network: "net1", ID: "c1", IfName: "eth0"}, []identity.Key{{Network: "net1", ID: "c1", IfName: "eth1"}, {Network: "net2", ID: "c1", IfName: "eth0"}}, []string{"c1/net1/eth0"}, []string{"c1/net1", "c1/net2"}},
			{identity.Key{Network: "net2", ID: "c1", IfName: "eth0"}, []identity.Key{{Network: "net1", ID: "c1", IfName: "eth1"}}, []string{"c1/net2"}, []string{"c1/net1/eth1"}},
			{identity.Key{Network: "net1", ID: "c1", IfName: "eth1"}, []identity.Key{}, []string{"c1"}, []string{"."}},
		}
		for _, s := range steps {
			if err := g.Remove(s.remove); err != nil {
				t.Fatalf("Remove(%s): %v", s.remove, err)
			}
			recs, damaged, err := g.Of("c1")
			if err != nil || len(damaged) != 0 || !reflect.DeepEqual(keysOf(recs), s.left) {
				t.Fatalf("after Remove(%s): Of = %v, %v, %v; want %v", s.remove, keysOf(recs), damaged, err, s.left)
			}
			for _, p := range s.gone {
				if exists(p) {
					t.Errorf("after Remove(%s): %s is still there", s.remove, p)
				}
			}
			for _, p := range s.kept {
				if !exists(p) {
					t.Errorf("after Remove(%s): %s is gone", s.remove, p)
				}
			}
		}
	})

	t.Run("Open of an existing directory sees its records", func(t *testing.T) {
		g := open(t)
		mustPut(t, g, full("c1", "net1", "eth0"))
		g2, err := Open(g.Dir())
		if err != nil {
			t.Fatal(err)
		}
		if recs, _, _ := g2.Of("c1"); len(recs) != 1 {
			t.Fatalf("a second Open sees %d records, want 1", len(recs))
		}
	})
}

func TestBadKeysAreRefused(t *testing.T) {
	good := identity.Key{Network: "net1", ID: "c1", IfName: "eth0"}
	with := func(f func(*identity.Key)) identity.Key { k := good; f(&k); return k }
	cases := []struct {
		name string
		key  identity.Key
	}{
		{"empty container id", with(func(k *identity.Key) { k.ID = "" })},
		{"container id climbing up", with(func(k *identity.Key) { k.ID = "../x" })},
		{"container id of a dot", with(func(k *identity.Key) { k.ID = "." })},
		{"container id of two dots", with(func(k *identity.Key) { k.ID = ".." })},
		{"container id starting with a dash", with(func(k *identity.Key) { k.ID = "-a" })},
		{"container id with a slash", with(func(k *identity.Key) { k.ID = "a/b" })},
		{"container id with a space", with(func(k *identity.Key) { k.ID = "a b" })},
		{"empty network", with(func(k *identity.Key) { k.Network = "" })},
		{"network with a slash", with(func(k *identity.Key) { k.Network = "a/b" })},
		{"network of two dots", with(func(k *identity.Key) { k.Network = ".." })},
		{"network starting with a dash", with(func(k *identity.Key) { k.Network = "-n" })},
		{"empty interface", with(func(k *identity.Key) { k.IfName = "" })},
		{"interface of a dot", with(func(k *identity.Key) { k.IfName = "." })},
		{"interface of two dots", with(func(k *identity.Key) { k.IfName = ".." })},
		{"interface with a slash", with(func(k *identity.Key) { k.IfName = "a/b" })},
		{"interface with a colon", with(func(k *identity.Key) { k.IfName = "eth0:1" })},
		{"interface with a space", with(func(k *identity.Key) { k.IfName = "eth 0" })},
		{"interface of 16 bytes", with(func(k *identity.Key) { k.IfName = "0123456789abcdef" })},
	}
	for _, c := range cases {
		t.Run(c.name+" is refused and nothing is written", func(t *testing.T) {
			g := open(t)
			before := files(t, g.Dir())
			r := full(c.key.ID, c.key.Network, c.key.IfName)
			if err := g.Put(r); !errors.Is(err, ErrInvalid) {
				t.Errorf("Put: %v, want ErrInvalid", err)
			}
			if err := g.Remove(c.key); !errors.Is(err, ErrInvalid) {
				t.Errorf("Remove: %v, want ErrInvalid", err)
			}
			if c.key.ID != good.ID {
				if _, _, err := g.Of(c.key.ID); !errors.Is(err, ErrInvalid) {
					t.Errorf("Of: %v, want ErrInvalid", err)
				}
			}
			if after := files(t, g.Dir()); !reflect.DeepEqual(after, before) {
				t.Errorf("the state directory changed:\n%v\nwas\n%v", after, before)
			}
		})
	}

	accepted := []struct {
		name string
		key  identity.Key
	}{
		{"container id with dots, dashes and underscores", with(func(k *identity.Key) { k.ID = "a.b_c-D9" })},
		{"network with dots, dashes and underscores", with(func(k *identity.Key) { k.Network = "my-net_1.v2" })},
		{"interface of 15 bytes", with(func(k *identity.Key) { k.IfName = "0123456789abcde" })},
		{"interface with a dot and a dash", with(func(k *identity.Key) { k.IfName = "eth0.1-x" })},
	}
	for _, c := range accepted {
		t.Run(c.name+" is accepted", func(t *testing.T) {
			g := open(t)
			mustPut(t, g, full(c.key.ID, c.key.Network, c.key.IfName))
			recs, _, err := g.Of(c.key.ID)
			if err != nil || len(recs) != 1 || recs[0].Key != c.key {
				t.Fatalf("Of = %v, %v", keysOf(recs), err)
			}
			if err := g.Remove(c.key); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("an empty state directory is refused", func(t *testing.T) {
		if _, err := Open(""); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Open(\"\"): %v, want ErrInvalid", err)
		}
	})
}

func TestDamagedRecordsAreKeptAndReported(t *testing.T) {
	encode := func(r *Record) []byte {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	versioned := func(v int, ifName string) []byte {
		r := full("c1", "net1", ifName)
		r.Version = v
		return encode(r)
	}
	valid := versioned(FormatVersion, "eth1")
	cases := []struct {
		name    string
		content []byte
		wantErr string
	}{
		{"garbage bytes", []byte("\x00\xff\xfeGARBAGE\n"), "corrupt"},
		{"an empty file", nil, "corrupt"},
		{"truncated JSON", valid[:len(valid)/2], "corrupt"},
		{"JSON that is not an object", []byte(`[1,2,3]`), "corrupt"},
		{"JSON null", []byte(`null`), "corrupt"},
		{"a record naming another key than its path", versioned(FormatVersion, "eth7"), "corrupt"},
		{"a record of version 0", versioned(0, "eth1"), "corrupt"},
		{"a record without a version", []byte(`{"network":"net1","containerID":"c1","ifName":"eth1"}`), "corrupt"},
		{"a record of a later version", versioned(FormatVersion+1, "eth1"), "newer"},
		{"a record of a later version whose fields changed shape",
			[]byte(fmt.Sprintf(`{"version":%d,"network":"net1","containerID":"c1","ifName":"eth1","addresses":{"v4":["10.0.0.1"]}}`, FormatVersion+1)), "newer"},
	}
	for _, c := range cases {
		t.Run(c.name+" is reported, never returned, and kept byte for byte", func(t *testing.T) {
			g := open(t)
			good := full("c1", "net1", "eth0")
			mustPut(t, g, good)
			bad := filepath.Join(g.Dir(), "attachments", "c1", "net1", "eth1")
			if err := os.WriteFile(bad, c.content, 0o600); err != nil {
				t.Fatal(err)
			}
			check := func(how string, got []identity.Key, damaged []Damaged, err error) {
				t.Helper()
				if err != nil {
					t.Errorf("%s: error %v", how, err)
				}
				if !reflect.DeepEqual(got, []identity.Key{good.Key}) {
					t.Errorf("%s returned records %v, want only %s", how, got, good.Key)
				}
				if len(damaged) != 1 || damaged[0].Path != bad || damaged[0].Err == nil {
					t.Fatalf("%s reported damaged %v, want %s", how, damaged, bad)
				}
				if msg := damaged[0].Error(); !strings.Contains(msg, c.wantErr) || !strings.Contains(msg, bad) {
					t.Errorf("%s: damage reported as %q, want it to name the path and say %q", how, msg, c.wantErr)
				}
			}
			all, err := g.All()
			check("All", keysOf(all.Records), all.Damaged, err)
			sums, err := g.Summaries()
			check("Summaries", keysOf(sums.Summaries), sums.Damaged, err)
			recs, damaged, err := g.Of("c1")
			check("Of", keysOf(recs), damaged, err)

			// Writing and removing the good sibling leaves it alone too.
			mustPut(t, g, good)
			if err := g.Remove(good.Key); err != nil {
				t.Fatal(err)
			}
			g.RemoveStaleTemps()
			raw, err := os.ReadFile(bad)
			if err != nil || !bytes.Equal(raw, c.content) {
				t.Fatalf("the damaged file is now %q, %v; want %q kept", raw, err, c.content)
			}
			recs, damaged, err = g.Of("c1")
			if err != nil || len(recs) != 0 || len(damaged) != 1 {
				t.Fatalf("after removing its sibling: Of = %v, %v, %v", keysOf(recs), damaged, err)
			}
			if k := (identity.Key{Network: "net1", ID: "c1", IfName: "eth1"}); damaged[0].Key != k || !damaged[0].Covers(k) || damaged[0].Covers(good.Key) {
				t.Errorf("the damaged file names %v (covers its own key: %v, its sibling's: %v), want %v", damaged[0].Key, damaged[0].Covers(k), damaged[0].Covers(good.Key), k)
			}

			// Neither a Put nor a Remove of its own key touches it.
			over := full("c1", "net1", "eth1")
			if err := g.Put(over); !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), bad) {
				t.Errorf("Put over the damaged file: %v, want ErrUnreadable naming %s", err, bad)
			}
			if err := g.Remove(over.Key); !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), bad) {
				t.Errorf("Remove of the damaged file: %v, want ErrUnreadable naming %s", err, bad)
			}
			if raw, err := os.ReadFile(bad); err != nil || !bytes.Equal(raw, c.content) {
				t.Fatalf("after a Put and a Remove of its key, the damaged file is %q, %v; want %q kept", raw, err, c.content)
			}
		})
	}

	t.Run("a file where a directory belongs is reported by All", func(t *testing.T) {
		g := open(t)
		mustPut(t, g, full("c1", "net1", "eth0"))
		for _, rel := range []string{"stray", "c1/stray"} {
			if err := os.WriteFile(filepath.Join(g.Dir(), "attachments", rel), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		all, err := g.All()
		if err != nil || len(all.Records) != 1 || len(all.Damaged) != 2 {
			t.Fatalf("All = %+v, %v; want one record and two damaged", all, err)
		}
		for _, d := range all.Damaged {
			if _, err := os.Stat(d.Path); err != nil {
				t.Errorf("damaged %s: %v", d.Path, err)
			}
		}
	})
}

// writeRecords writes n records straight to dir's files (as Put would,
// without its fsyncs), over n/4 ids of two networks and two interfaces.
func writeRecords(t testing.TB, g *Registry, n int) {
	t.Helper()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range n {
		r := full(fmt.Sprintf("c%05d", i/4), fmt.Sprintf("net%d", i/2%2), fmt.Sprintf("eth%d", i%2))
		r.Version, r.Since, r.Updated = FormatVersion, since, since
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		path := g.path(r.Key)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTenThousandRecords(t *testing.T) {
	if testing.Short() {
		netsandbox.Unavailable(t, "10,000 records: not in -short")
	}
	const n = 10_000
	g := open(t)
	writeRecords(t, g, n)
	// And a few through Put, to the same directories.
	for i := range 3 {
		mustPut(t, g, full(fmt.Sprintf("c%05d", i), "net9", "eth0"))
	}
	start := time.Now()
	all, err := g.All()
	took := time.Since(start)
	if err != nil || len(all.Damaged) != 0 {
		t.Fatalf("All: %v, damaged %v", err, all.Damaged)
	}
	if len(all.Records) != n+3 {
		t.Fatalf("All returned %d records, want %d", len(all.Records), n+3)
	}
	sorted := sort.SliceIsSorted(all.Records, func(i, j int) bool {
		a, b := all.Records[i].Key, all.Records[j].Key
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		if a.Network != b.Network {
			return a.Network < b.Network
		}
		return a.IfName < b.IfName
	})
	if !sorted {
		t.Fatal("All's records are not sorted by id, network, interface")
	}
	seen := map[identity.Key]bool{}
	for _, r := range all.Records {
		if seen[r.Key] {
			t.Fatalf("%s returned twice", r.Key)
		}
		seen[r.Key] = true
		if len(r.Addresses) != 2 || len(r.ConfList) == 0 || r.Path() == "" {
			t.Fatalf("%s read incompletely: %+v", r.Key, r)
		}
	}
	// status --attachments must list 10,000 records in under a second
	// (BenchmarkListing10000 measures it); this bound, generous enough for
	// -race on a loaded machine, catches only what grows worse than
	// linearly.
	if took > 10*time.Second {
		t.Errorf("All over %d records took %v", n, took)
	}
	t.Logf("All over %d records: %v", n+3, took)
}

func BenchmarkAll10000(b *testing.B) {
	g := open(b)
	writeRecords(b, g, 10_000)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		all, err := g.All()
		if err != nil || len(all.Records) != 10_000 {
			b.Fatalf("All: %d records, %v", len(all.Records), err)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	g := open(b)
	r := full("c1", "net1", "eth0")
	b.ReportAllocs()
	for b.Loop() {
		if err := g.Put(r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBoots: a record names the boot it was first written in, kept by
// later writes; one of another boot is from an earlier one, one that
// names none (an older cninet's) is never judged so.
func TestBoots(t *testing.T) {
	g := open(t)
	now := CurrentBoot()
	if now == "" {
		t.Fatalf("no boot id in %s", bootIDPath)
	}
	r := full("c1", "net1", "eth0")
	mustPut(t, g, r)
	if r.Boot != now || r.FromEarlierBoot() {
		t.Fatalf("a new record's boot %q (earlier: %v), want the running one %q", r.Boot, r.FromEarlierBoot(), now)
	}
	old := full("c2", "net1", "eth0")
	old.Boot = "11111111-2222-3333-4444-555555555555"
	mustPut(t, g, old)
	old.State = Detaching
	mustPut(t, g, old) // a detach's proof, written in this boot, of an attachment made in an earlier one
	recs, _, err := g.Of("c2")
	if err != nil || len(recs) != 1 || recs[0].Boot != old.Boot || !recs[0].FromEarlierBoot() {
		t.Fatalf("a record of an earlier boot rewritten: %+v, %v; want its boot kept and judged earlier", recs, err)
	}
	if (Record{}).FromEarlierBoot() {
		t.Fatal("a record that names no boot judged from an earlier one")
	}
}

func TestOpenRefusesARelativeStateDirectory(t *testing.T) {
	for _, dir := range []string{"state", "./var/lib/cninet", "../cninet"} {
		if _, err := Open(dir); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "absolute") {
			t.Errorf("Open(%q): %v, want ErrInvalid asking for an absolute path", dir, err)
		}
	}
}

func TestRemoveStaleTemps(t *testing.T) {
	cases := []struct {
		name string
		age  time.Duration
		dir  bool
		gone bool
	}{
		{"a temp file just written is kept", 0, false, false},
		{"a temp file younger than staleTempAge is kept", staleTempAge - time.Minute, false, false},
		{"a temp file older than staleTempAge is removed", staleTempAge + time.Minute, false, true},
		{"a temp file a day old is removed", 24 * time.Hour, false, true},
		{"an old directory in tmp is kept", time.Hour, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := open(t)
			path := filepath.Join(g.Dir(), "tmp", "record-123")
			err := os.MkdirAll(filepath.Dir(path), 0o700)
			if err != nil {
				t.Fatal(err)
			}
			if c.dir {
				err = os.Mkdir(path, 0o700)
			} else {
				err = os.WriteFile(path, []byte(`{"version":1,`), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			then := time.Now().Add(-c.age)
			if err := os.Chtimes(path, then, then); err != nil {
				t.Fatal(err)
			}
			g.RemoveStaleTemps()
			_, err = os.Stat(path)
			if gone := errors.Is(err, os.ErrNotExist); gone != c.gone {
				t.Fatalf("removed: %v, want %v (stat: %v)", gone, c.gone, err)
			}
		})
	}
}

// A listing taken while another process detaches (GC, the repair
// watcher and Attachments list without the ids' locks) sees each record
// whole or not at all: one removed meanwhile is gone, not damaged, and
// the listing does not fail for it.
func TestAListingRacingARemovalSeesItGoneNotDamaged(t *testing.T) {
	g := open(t)
	if err := g.Put(full("keep", "n", "eth0")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = g.Put(full("churn", "n", "eth0"))
			_ = g.Remove(identity.Key{Network: "n", ID: "churn", IfName: "eth0"})
		}
	}()
	defer func() { close(stop); <-done }()
	for range 2000 {
		l, err := g.All()
		if err != nil || len(l.Damaged) > 0 {
			t.Fatalf("a listing racing a removal: %v, damaged %v", err, l.Damaged)
		}
		if !slices.ContainsFunc(l.Records, func(r Record) bool { return r.ID == "keep" }) {
			t.Fatal("the record that stays was not listed")
		}
	}
}
