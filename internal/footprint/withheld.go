package footprint

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/seed1280861d/cninet/internal/hostwork"
	"github.com/seed1280861d/cninet/internal/identity"
)

// The intent record. Before a DEL, Prevent takes out of libcni's cached
// result every address the attachment does not provably still own (the
// firewall plugin's DEL deletes by those addresses; see prevent.go). It
// first writes what it takes out, fsynced, to
//
//	<CacheDir>/cninet/withheld/<network>/<container id>
//	{"network":"N","id":"ID","ifName":"eth0","addresses":["198.18.0.5"]}
//
// and only then rewrites the cached result. The record proves those
// addresses to the force cleanup, which removes their rules by the
// ownership rule instead of the DEL: libcni deletes its cached result at
// the end of the DEL, and a runner killed before the cleanup would lose
// the proof with it. The cleanup removes the record last, once everything
// else went well; until then any later Teardown or GC of the attachment
// reads it and finishes the work. A record holds no address: it speaks
// of an attachment that was being torn down. Both writes go through a
// temporary file in <CacheDir>/cninet/tmp, never beside the files
// themselves: libcni takes any file in its results directory for a
// cached attachment, whatever its name.

type withheld struct{}

// intentRecord is one intent record.
type intentRecord struct {
	net, id, ifName, path string
	addrs                 []netip.Addr
}

func (r intentRecord) att() Attachment { return Attachment{r.net, r.id} }

// intentRecordFile is the record's JSON form.
type intentRecordFile struct {
	Network   string       `json:"network"`
	ID        string       `json:"id"`
	IfName    string       `json:"ifName,omitempty"`
	Addresses []netip.Addr `json:"addresses"`
}

func recordDir(cacheDir, network string) string {
	return filepath.Join(cacheDir, "cninet", "withheld", network)
}

func recordPath(cacheDir, network, id string) string {
	return filepath.Join(recordDir(cacheDir, network), id)
}

// prove reads the intent records and the proof store (Seams.Proofs).
func (withheld) prove(v *view, set attSet) []claim {
	out := claimsOfFiles(v, set, func(f hostFiles) []intentRecord { return f.records },
		func(r intentRecord) []netip.Addr { return r.addrs })
	if store := v.host.Proofs; store != nil {
		for _, att := range set.sorted() {
			for _, a := range store.Recorded(att) {
				out = append(out, claim{a, att})
			}
		}
	}
	return out
}

func (withheld) holders(*view, attSet, addrSet) []claim { return nil }

// plan removes the set's records, last and only when the rest went well
// (plan.records).
// A record read both before the DEL and now is planned once: the
// paths planned are kept in a set, so that a sweep of many records costs
// one lookup per record.
func (withheld) plan(v *view, set attSet, _ *evidence, p *plan) {
	planned := make(map[string]bool, len(p.records))
	for _, c := range p.records {
		planned[c.path] = true
	}
	for _, r := range append(slices.Clip(v.prior.records), v.files.records...) {
		if set[r.att()] && !planned[r.path] {
			planned[r.path] = true
			p.records = append(p.records, fileChange{kind: KindIntentRecord, att: r.att(), path: r.path})
		}
	}
}

func (withheld) discover(v *view, found attSet) {
	for _, r := range v.files.records {
		found[r.att()] = true
	}
}

// readRecordOf reads the record of one attachment, if there is one. A
// record that cannot be read proves nothing but is the attachment's by
// its path, and goes with it.
func readRecordOf(v *view, n Network, id string) (intentRecord, bool) {
	path := recordPath(n.CacheDir, n.Name, id)
	r, err := readRecord(path)
	switch {
	case err == nil:
		return r, r.att() == Attachment{n.Name, id}
	case errors.Is(err, os.ErrNotExist):
		return intentRecord{}, false
	}
	return intentRecord{net: n.Name, id: id, path: path}, true
}

// readAllRecords reads every record of n.
func readAllRecords(v *view, n Network) []intentRecord {
	end := v.meter.Begin(hostwork.File, "intent records of "+n.Name, false)
	defer end(0, 0)
	entries, err := os.ReadDir(recordDir(n.CacheDir, n.Name))
	if !errors.Is(err, os.ErrNotExist) {
		v.errs.add(err)
	}
	var out []intentRecord
	for _, e := range entries {
		if !e.Type().IsRegular() || !IsContainerID(e.Name()) {
			continue // a temporary file of a write cut short, say
		}
		if r, ok := readRecordOf(v, n, e.Name()); ok {
			out = append(out, r)
		}
	}
	return out
}

func readRecord(path string) (intentRecord, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return intentRecord{}, err
	}
	var f intentRecordFile
	if err := json.Unmarshal(raw, &f); err != nil || !IsContainerID(f.ID) || f.Network == "" {
		return intentRecord{}, fmt.Errorf("%s: not a readable intent record", path)
	}
	return intentRecord{net: f.Network, id: f.ID, ifName: f.IfName, path: path, addrs: f.Addresses}, nil
}

// writeRecord records that att's addresses addrs, on interface ifName,
// are withheld from its DEL, adding them to what an earlier record says.
func writeRecord(cacheDir string, att Attachment, ifName string, addrs []netip.Addr) error {
	path := recordPath(cacheDir, att.Network, att.ID)
	if old, err := readRecord(path); err == nil {
		addrs = append(slices.Clone(old.addrs), addrs...)
		ifName = cmp.Or(ifName, old.ifName)
	}
	raw, err := json.Marshal(intentRecordFile{Network: att.Network, ID: att.ID, IfName: ifName, Addresses: uniqueAddrs(addrs)})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("writing intent record: %w", err)
	}
	return writeFileAtomic(cacheDir, path, raw, 0o600)
}

// IntentRecordsOf returns the attachments of container id that intent
// records under cacheDir name, among networks: a DEL of each began and its
// force cleanup has not finished. A Teardown finishes them even when
// libcni's cache, which the DEL removed, no longer knows them.
func IntentRecordsOf(cacheDir, id string, networks []string) []identity.Key {
	var out []identity.Key
	for _, n := range networks {
		if r, err := readRecord(recordPath(cacheDir, n, id)); err == nil && r.net == n && r.id == id {
			out = append(out, identity.Key{Network: n, ID: id, IfName: r.ifName})
		}
	}
	return out
}

// crashAt, when a test sets it, is called at each step of an atomic write
// and stops the write there when it returns an error, as a process killed
// at that point would.
var crashAt func(step string) error

// errCrashed wraps what crashAt returns: a process killed there cleans
// nothing up.
var errCrashed = errors.New("crashed")

func step(name string) error {
	if crashAt == nil {
		return nil
	}
	if err := crashAt(name); err != nil {
		return fmt.Errorf("%w at %s: %w", errCrashed, name, err)
	}
	return nil
}

// staleTempAge is how old a temporary file must be before a sweep takes
// it for one a killed process left: no write takes that long.
const staleTempAge = 10 * time.Minute

// removeStaleTemps removes the temporary files killed writes left in
// cacheDir's tmpDir.
func removeStaleTemps(cacheDir string) {
	entries, err := os.ReadDir(tmpDir(cacheDir))
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && time.Since(info.ModTime()) > staleTempAge {
			os.Remove(filepath.Join(tmpDir(cacheDir), e.Name()))
		}
	}
}

// tmpDir is where writeFileAtomic writes before it renames: under the
// same cache directory (one file system), apart from the files it
// replaces.
func tmpDir(cacheDir string) string { return filepath.Join(cacheDir, "cninet", "tmp") }

// writeFileAtomic replaces path, a file under cacheDir, with data: a
// reader, or a process that dies at any point, sees either the old file
// or the whole new one, and the new one survives a crash of the host once
// it returns. A temporary file a process killed halfway leaves in tmpDir
// is removed by the next sweep (removeStaleTemps).
func writeFileAtomic(cacheDir, path string, data []byte, perm os.FileMode) (err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("writing %s: %w", path, err)
		}
	}()
	if err := os.MkdirAll(tmpDir(cacheDir), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(tmpDir(cacheDir), "write-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil && !errors.Is(err, errCrashed) {
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := step("write"); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := step("sync"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := step("rename"); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if err := step("sync dir"); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
