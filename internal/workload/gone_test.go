package workload

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/seed1280861d/cninet/internal/registry"
)

// TestGone: a namespace is judged gone only where the host proves it:
// its path reaches no network namespace, or another one, and no process
// holds it. Everything here is this process's own: its namespace, its
// mount namespace's file, temporary files.
func TestGone(t *testing.T) {
	own := Inode("/proc/self/ns/net")
	if own == 0 {
		t.Fatal("this process's network namespace has no inode")
	}
	regular := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "gone")
	cases := []struct {
		name  string
		path  string
		inode uint64
		gone  bool
	}{
		{"an empty path proves nothing", "", 0, false},
		{"an empty path with an inode proves nothing", "", own, false},
		{"a path that reaches the namespace of the recorded inode", "/proc/self/ns/net", own, false},
		{"a path that no longer exists, no inode known", missing, 0, true},
		{"a regular file where the namespace was", regular, 0, true},
		{"a namespace of another kind", "/proc/self/ns/mnt", 0, true},
		{"a path of the caller's own namespace, no inode known: no workload's", "/proc/self/ns/net", 0, true},
		{"a path that reaches another namespace than the recorded one, which nothing holds", "/proc/self/ns/net", own + 1<<40, true},
		{"a path that no longer exists, of a namespace a process still holds", missing, own, false},
		{"a path that no longer exists, of a namespace nothing holds", missing, own + 1<<40, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := (&Probe{}).Gone(c.path, c.inode); got != c.gone {
				t.Fatalf("Gone(%q, %d) = %v, want %v", c.path, c.inode, got, c.gone)
			}
		})
	}
}

// TestRecordGone: a record of an earlier boot is gone, wherever its
// path points; one of this boot as its namespace is.
func TestRecordGone(t *testing.T) {
	own := Inode("/proc/self/ns/net")
	live := registry.Record{NetNS: "/proc/self/ns/net", NetNSInode: own, Boot: registry.CurrentBoot()}
	if (&Probe{}).RecordGone(live) {
		t.Fatal("a record of this boot whose namespace is there judged gone")
	}
	earlier := live
	earlier.Boot = "00000000-0000-0000-0000-000000000000"
	if !(&Probe{}).RecordGone(earlier) {
		t.Fatal("a record of an earlier boot judged alive")
	}
	unknown := live
	unknown.Boot = ""
	if (&Probe{}).RecordGone(unknown) {
		t.Fatal("a record that names no boot, whose namespace is there, judged gone")
	}
}
