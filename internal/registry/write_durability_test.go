package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/identity"
)

// A power loss keeps of a directory entry only what a sync of its
// directory made durable, and of a file's data only what an fsync of the
// file did. journalDisk records, in order, every change of a directory
// entry and every sync the registry makes; powerLoss replays the journal
// and says what a host that lost power right after it would find. The
// tests below hold every write, removal and lock to what the package
// promises: a record written survives, a record removed stays gone, and
// every directory the registry creates survives, whichever sync would be
// dropped (TestDroppingAnySyncIsCaught).

// journalDisk is the real disk, with every call recorded.
type journalDisk struct {
	osDisk
	ops   []diskOp
	drop  int      // when > 0, the drop-th sync (of a file or a directory) is not made
	n     int      // syncs so far
	sites []string // the site of each
}

// diskOp is one recorded call: mkdir, create, write, fsync, rename,
// remove or syncdir, on path (to: rename's target), or "returned": the
// end of one of the registry's operations. A sync names its site, the
// line of the registry that made it.
type diskOp struct{ op, path, to, site string }

func (d *journalDisk) record(op, path string) { d.ops = append(d.ops, diskOp{op: op, path: path}) }

// syncing counts a sync and reports whether it is to be dropped, and
// its site (the registry's line that called it, depth frames up).
func (d *journalDisk) syncing(depth int) (drop bool, site string) {
	d.n++
	_, file, line, _ := runtime.Caller(depth + 1)
	site = fmt.Sprintf("%s:%d", filepath.Base(file), line)
	d.sites = append(d.sites, site)
	return d.n == d.drop, site
}

func (d *journalDisk) mkdir(path string) error {
	err := d.osDisk.mkdir(path)
	if err == nil {
		d.record("mkdir", path)
	}
	return err
}

func (d *journalDisk) createTemp(dir, pattern string) (diskFile, error) {
	f, err := d.osDisk.createTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	d.record("create", f.Name())
	return journalFile{f, d}, nil
}

func (d *journalDisk) rename(from, to string) error {
	err := d.osDisk.rename(from, to)
	if err == nil {
		d.ops = append(d.ops, diskOp{op: "rename", path: from, to: to})
	}
	return err
}

func (d *journalDisk) remove(path string) error {
	err := d.osDisk.remove(path)
	if err == nil {
		d.record("remove", path)
	}
	return err
}

func (d *journalDisk) syncDir(dir string) error {
	drop, site := d.syncing(1)
	if drop {
		return nil
	}
	err := d.osDisk.syncDir(dir)
	if err == nil {
		d.ops = append(d.ops, diskOp{op: "syncdir", path: dir, site: site})
	}
	return err
}

type journalFile struct {
	diskFile
	d *journalDisk
}

func (f journalFile) Write(p []byte) (int, error) {
	f.d.record("write", f.Name())
	return f.diskFile.Write(p)
}

func (f journalFile) Sync() error {
	drop, site := f.d.syncing(1)
	if drop {
		return nil
	}
	f.d.ops = append(f.d.ops, diskOp{op: "fsync", path: f.Name(), site: site})
	return f.diskFile.Sync()
}

// useJournal makes the registry write through a journalDisk (dropping
// its drop-th sync, when drop > 0) for the rest of the test.
func useJournal(t *testing.T, drop int) *journalDisk {
	t.Helper()
	d := &journalDisk{drop: drop}
	fsys = d
	t.Cleanup(func() { fsys = osDisk{} })
	return d
}

// durableView is what a host that lost power keeps, as replayed from a
// journal: which entries of which directories are durable, naming which
// inode, and which inodes' data is.
type durableView struct {
	live, durable map[string]int // path → inode (0: a directory)
	synced        map[int]bool   // inodes whose data is durable
}

// replay applies one recorded call.
func (v *durableView) replay(o diskOp, inode *int) {
	switch o.op {
	case "mkdir":
		v.live[o.path] = 0
	case "create":
		*inode++
		v.live[o.path] = *inode
	case "write":
		delete(v.synced, v.live[o.path])
	case "fsync":
		v.synced[v.live[o.path]] = true
	case "rename":
		v.live[o.to] = v.live[o.path]
		delete(v.live, o.path)
	case "remove":
		delete(v.live, o.path)
	case "syncdir":
		for p := range v.durable {
			if filepath.Dir(p) == o.path {
				delete(v.durable, p)
			}
		}
		for p, ino := range v.live {
			if filepath.Dir(p) == o.path {
				v.durable[p] = ino
			}
		}
	}
}

// survives reports whether path would be found as it is now after a
// power loss: its entry, naming the same inode, and every directory's
// above it durable, and a file's data synced.
func (v durableView) survives(path string) bool {
	ino, ok := v.durable[path]
	if live, there := v.live[path]; !ok || !there || live != ino || ino != 0 && !v.synced[ino] {
		return false
	}
	return v.reachable(path)
}

// reachable reports whether every directory above path is durable.
func (v durableView) reachable(path string) bool {
	for p := filepath.Dir(path); p != filepath.Dir(p); p = filepath.Dir(p) {
		if _, ok := v.durable[p]; !ok {
			return false
		}
	}
	return true
}

// powerLoss replays ops over a host on which the paths in existing were
// there, durably, before, and returns what a power loss right after each
// of the registry's operations (each "returned") would get wrong of what
// that operation promised: a directory it made, a file it renamed into
// place (a record) missing or old, a file or directory it removed back.
func powerLoss(ops []diskOp, existing ...string) []string {
	v := durableView{live: map[string]int{}, durable: map[string]int{}, synced: map[int]bool{}}
	for _, p := range existing {
		for ; p != filepath.Dir(p); p = filepath.Dir(p) {
			v.live[p], v.durable[p] = 0, 0
		}
	}
	var lost []string
	inode, from := 0, 0
	for i, o := range ops {
		if o.op != "returned" {
			v.replay(o, &inode)
			continue
		}
		for _, done := range ops[from:i] {
			_, live := v.live[done.path]
			switch {
			case done.op == "mkdir" && live && !v.survives(done.path):
				lost = append(lost, fmt.Sprintf("%s: the directory %s it made", o.path, done.path))
			case done.op == "rename" && !v.survives(done.to):
				lost = append(lost, fmt.Sprintf("%s: what it wrote to %s", o.path, done.to))
			case done.op == "remove" && !live && v.has(done.path):
				lost = append(lost, fmt.Sprintf("%s: the removal of %s", o.path, done.path))
			}
		}
		from = i + 1
	}
	return lost
}

// has reports whether path's entry, and every directory above it, is
// durable: a power loss brings it back.
func (v durableView) has(path string) bool {
	_, ok := v.durable[path]
	return ok && v.reachable(path)
}

// durabilityStep is one of the registry's operations.
type durabilityStep struct {
	name string
	run  func(g *Registry) error
}

func putStep(id, network string, state State) durabilityStep {
	return durabilityStep{fmt.Sprintf("Put %s/%s (%s)", id, network, state), func(g *Registry) error {
		r := full(id, network, "eth0")
		r.State = state
		return g.Put(r)
	}}
}

func removeStep(id, network string) durabilityStep { return removeIfStep(id, network, "eth0") }

func removeIfStep(id, network, ifName string) durabilityStep {
	return durabilityStep{fmt.Sprintf("Remove %s/%s/%s", id, network, ifName), func(g *Registry) error {
		return g.Remove(identity.Key{Network: network, ID: id, IfName: ifName})
	}}
}

var lockStep = durabilityStep{"LockID c9", func(g *Registry) error {
	unlock, err := g.LockID(context.Background(), "c9")
	if err == nil {
		unlock()
	}
	return err
}}

var gcLockStep = durabilityStep{"LockGC", func(g *Registry) error {
	unlock, err := g.LockGC(context.Background(), true)
	if err == nil {
		unlock()
	}
	return err
}}

// staleTempStep leaves a stale temp file, as a killed write does, and
// removes it with RemoveStaleTemps.
var staleTempStep = durabilityStep{"RemoveStaleTemps", func(g *Registry) error {
	dir, err := g.mkdir("tmp")
	if err != nil {
		return err
	}
	// What a write killed after its fsync leaves, made durable here.
	f, err := fsys.createTemp(dir, "record-*")
	if err != nil {
		return err
	}
	path := f.Name()
	if _, err := f.Write([]byte("{")); err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close(), fsys.syncDir(dir)); err != nil {
		return err
	}
	then := time.Now().Add(-2 * staleTempAge)
	if err := os.Chtimes(path, then, then); err != nil {
		return err
	}
	if g.RemoveStaleTemps() != 1 {
		return errors.New("the stale temp file was not removed")
	}
	return nil
}}

// durabilityCases are histories of the registry's operations, each on a
// state directory that does not exist yet, that between them make every
// sync the registry has the only one that keeps some promise.
var durabilityCases = []struct {
	name  string
	steps []durabilityStep
}{
	{"a first Put", []durabilityStep{putStep("c1", "net1", Adding)}},
	{"Puts replacing a record", []durabilityStep{putStep("c1", "net1", Adding), putStep("c1", "net1", Attached), putStep("c1", "net1", Detaching)}},
	{"a Put when tmp/ went", []durabilityStep{putStep("c1", "net1", Adding), {"tmp/ removed", func(g *Registry) error {
		return os.Remove(filepath.Join(g.Dir(), "tmp"))
	}}, putStep("c2", "net1", Adding)}},
	{"a Remove of the id's last record", []durabilityStep{putStep("c1", "net1", Attached), removeStep("c1", "net1")}},
	{"a Remove beside a record of the same id", []durabilityStep{putStep("c1", "net1", Attached), putStep("c1", "net2", Attached), removeStep("c1", "net1")}},
	{"a Remove beside a record of the same id and network", []durabilityStep{putStep("c1", "net1", Attached), {"Put c1/net1/eth1", func(g *Registry) error {
		return g.Put(full("c1", "net1", "eth1"))
	}}, removeIfStep("c1", "net1", "eth0")}},
	{"locks first", []durabilityStep{lockStep, gcLockStep, putStep("c1", "net1", Adding)}},
	{"stale temps removed", []durabilityStep{staleTempStep}},
}

// runHistory runs steps through a journal on a fresh state directory,
// dropping the drop-th sync (none: 0), and returns the journal and what a
// power loss after any step would get wrong.
func runHistory(t *testing.T, steps []durabilityStep, drop int) (*journalDisk, []string) {
	t.Helper()
	parent := t.TempDir()
	d := useJournal(t, drop)
	g, err := Open(filepath.Join(parent, "state"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if err := s.run(g); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		d.ops = append(d.ops, diskOp{op: "returned", path: s.name})
	}
	return d, powerLoss(d.ops, parent)
}

// TestWhatPowerLossKeeps: after each of the registry's operations, a
// power loss keeps every directory it made and everything it wrote, and
// loses everything it removed.
func TestWhatPowerLossKeeps(t *testing.T) {
	for _, c := range durabilityCases {
		t.Run(c.name, func(t *testing.T) {
			if _, lost := runHistory(t, c.steps, 0); len(lost) > 0 {
				t.Fatalf("a power loss right after an operation would get wrong:\n%s", strings.Join(lost, "\n"))
			}
		})
	}
}

// syncSites are the lines of the registry's own code that sync a file or
// a directory.
func syncSites(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	call := regexp.MustCompile(`\bfsys\.syncDir\(|\bf\.Sync\(\)`)
	var sites []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if call.MatchString(line) {
				sites = append(sites, fmt.Sprintf("%s:%d", name, i+1))
			}
		}
	}
	return sites
}

// TestDroppingAnySyncIsCaught: every line of the registry that syncs a
// file or a directory is reached by some history above, and leaving out
// its sync makes TestWhatPowerLossKeeps's check fail in at least one of
// them: no sync can be dropped unseen.
func TestDroppingAnySyncIsCaught(t *testing.T) {
	caught := map[string]bool{}
	reached := map[string]bool{}
	for _, c := range durabilityCases {
		d, _ := runHistory(t, c.steps, 0)
		for drop, site := range d.sites {
			if strings.Contains(site, "_test.go:") {
				continue // a history's own sync, setting the scene
			}
			reached[site] = true
			if _, lost := runHistory(t, c.steps, drop+1); len(lost) > 0 {
				caught[site] = true
			}
		}
	}
	sites := syncSites(t)
	if len(sites) == 0 {
		t.Fatal("no sync found in the registry's code")
	}
	for _, site := range sites {
		switch {
		case !reached[site]:
			t.Errorf("the sync at %s is reached by no history: add one", site)
		case !caught[site]:
			t.Errorf("the sync at %s can be dropped and no power loss loses anything: the check cannot see it", site)
		}
	}
	for site := range reached {
		if !slices.Contains(sites, site) {
			t.Errorf("a sync at %s that the source scan did not find", site)
		}
	}
}
