package registry

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/identity"
)

// Naming answers as Summaries does, decoding only the records whose
// bytes may name an asked address: for an IPv4 one, those that hold its
// text between quotes or have an escape; for an IPv6 one, all of them.
func TestNamingDecodesOnlyTheRecordsThatMayNameAnAskedAddress(t *testing.T) {
	g, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	named, other, escaped := full("c1", "net1", "eth0"), full("c2", "net1", "eth0"), full("c3", "net1", "eth0")
	named.Addresses = []netip.Addr{netip.MustParseAddr("198.18.0.5")}
	other.Addresses = []netip.Addr{netip.MustParseAddr("198.18.0.55")}
	escaped.Addresses = []netip.Addr{netip.MustParseAddr("198.18.0.5")}
	for _, r := range []*Record{named, other, escaped} {
		mustPut(t, g, r)
	}
	// c3's address written with an escape, as a hand-edited file may:
	// the same address once decoded.
	path := filepath.Join(g.dir, "attachments", "c3", "net1", "eth0")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(raw), `"198.18.0.5"`, `"198.18.0.\u0035"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	// c4's file is damaged and names nothing asked.
	if err := os.MkdirAll(filepath.Join(g.dir, "attachments", "c4", "net1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.dir, "attachments", "c4", "net1", "eth0"), []byte(`{"version":1,`), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := func(s Summaries) (sums, damaged []string) {
		for _, x := range s.Summaries {
			sums = append(sums, x.ID)
		}
		for _, d := range s.Damaged {
			damaged = append(damaged, d.Key.ID)
		}
		return sums, damaged
	}
	for _, tc := range []struct {
		name          string
		asked         []netip.Addr
		sums, damaged []string
	}{
		{"an IPv4 address: the records holding its text or an escape", []netip.Addr{netip.MustParseAddr("198.18.0.5")}, []string{"c1", "c3"}, nil},
		{"another IPv4 address: its record, and the one with an escape", []netip.Addr{netip.MustParseAddr("198.18.0.55")}, []string{"c2", "c3"}, nil},
		{"an IPv6 address: every record", []netip.Addr{netip.MustParseAddr("fd00::2")}, []string{"c1", "c2", "c3"}, []string{"c4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := g.Naming(tc.asked)
			if err != nil {
				t.Fatal(err)
			}
			sums, damaged := ids(got)
			if !slices.Equal(sums, tc.sums) || !slices.Equal(damaged, tc.damaged) {
				t.Errorf("decoded %q, damaged %q; want %q, %q", sums, damaged, tc.sums, tc.damaged)
			}
			for _, s := range got.Summaries {
				if s.Key == (identity.Key{Network: "net1", ID: "c3", IfName: "eth0"}) && !slices.Equal(s.Addresses, escaped.Addresses) {
					t.Errorf("c3's escaped address decoded as %v", s.Addresses)
				}
			}
		})
	}
}

// BenchmarkHolders asks a registry of 1,000 records who holds one IPv4
// address, as a Teardown's prevention does: Naming against Summaries.
func BenchmarkHolders(b *testing.B) {
	g, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		r := full(fmt.Sprintf("c%d", i), "net1", "eth0")
		r.Addresses = []netip.Addr{netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})}
		mustPut(b, g, r)
	}
	asked := []netip.Addr{netip.MustParseAddr("198.18.1.1")}
	for _, bc := range []struct {
		name string
		read func() (Summaries, error)
	}{{"Summaries", g.Summaries}, {"Naming", func() (Summaries, error) { return g.Naming(asked) }}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A small registry is read on the caller's goroutine: on a busy host a
// goroutine handed the reads first waits to run, longer than they take.
func TestASmallRegistryIsReadOnTheCallersGoroutine(t *testing.T) {
	g, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		mustPut(t, g, full(fmt.Sprintf("c%d", i), "net1", "eth0"))
	}
	caller := goroutineOf()
	var others []string
	recs, _, err := readAll(g, decoding(func(raw []byte, path string, k identity.Key) (Summary, error) {
		if id := goroutineOf(); id != caller {
			others = append(others, id)
		}
		return decodeSummary(raw, path, k)
	}))
	if err != nil || len(recs) != 8 {
		t.Fatalf("read %d records, err %v; want 8", len(recs), err)
	}
	if len(others) > 0 {
		t.Errorf("records decoded on other goroutines (%q) than the caller's (%s)", others, caller)
	}
}

// goroutineOf is the calling goroutine's number, as its stack names it.
func goroutineOf() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}
