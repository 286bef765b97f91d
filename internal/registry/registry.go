package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/seed1280861d/cninet/internal/identity"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed1280861d/cninet/internal/killpoint"
)

// The layout under the state directory:
//
//	attachments/<container id>/<network>/<ifname>   one record, JSON
//	locks/id/<container id>                          the id's lock file (locks.go)
//	locks/gc                                         the host-wide GC lock
//	tmp/                                             writes in progress
//
// A record is written to tmp/, fsynced, renamed into place and its
// directory fsynced: a reader, or a process killed at any point, sees the
// old record or the whole new one, and a written record survives a crash
// of the host. What a killed write leaves in tmp/ is removed later
// (RemoveStaleTemps).

// DefaultDir is the state directory every process on a host shares
// unless told otherwise.
const DefaultDir = "/var/lib/cninet"

// ErrInvalid marks an attachment key or record this package refuses.
var ErrInvalid = errors.New("invalid registry record")

// Registry is the host registry in one state directory. It holds no
// state in memory: every call reads and writes the directory, so every
// process on the host sees the same records.
type Registry struct {
	dir string
}

// ErrUnreadable marks a registry file that is no record this version can
// read (damaged, or of a later format) where a record was to be written
// or removed: it is kept byte for byte, and the error names it.
var ErrUnreadable = errors.New("registry record unreadable")

// Open returns the registry in dir, which must be an absolute path: every
// process on the host must find the same one, whatever its working
// directory. Nothing is read or created until it is used: its
// directories are created (0700), each synced into its parent, by the
// first write or lock.
func Open(dir string) (*Registry, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty state directory", ErrInvalid)
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: state directory %q is relative, want an absolute path (every process on the host must find the same one)", ErrInvalid, dir)
	}
	return &Registry{dir: filepath.Clean(dir)}, nil
}

// mkdir creates the registry's directory sub (a path of one or more
// elements) when missing, and the state directory itself, each new
// directory synced into its parent.
func (g *Registry) mkdir(sub ...string) (string, error) {
	if _, err := mkdirAllSynced(g.dir, sub...); err != nil {
		return "", fmt.Errorf("host registry: %w", err)
	}
	return filepath.Join(append([]string{g.dir}, sub...)...), nil
}

// Dir is the state directory.
func (g *Registry) Dir() string { return g.dir }

// containerID and networkName are the CNI spec's rules; a record whose
// key breaks them would escape its directory.
var (
	containerID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)
	networkName = containerID
)

func checkKey(k identity.Key) error {
	switch {
	case !containerID.MatchString(k.ID):
		return fmt.Errorf("%w: container id %q, want ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$", ErrInvalid, k.ID)
	case !networkName.MatchString(k.Network):
		return fmt.Errorf("%w: network name %q, want ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$", ErrInvalid, k.Network)
	case k.IfName == "" || k.IfName == "." || k.IfName == ".." || len(k.IfName) > 15 || strings.ContainsAny(k.IfName, "/: \t\n\v\f\r"):
		return fmt.Errorf("%w: interface name %q, want 1-15 bytes without '/', ':' or white space", ErrInvalid, k.IfName)
	}
	return nil
}

func (g *Registry) idDir(id string) string { return filepath.Join(g.dir, "attachments", id) }

func (g *Registry) path(k identity.Key) string {
	return filepath.Join(g.idDir(k.ID), k.Network, k.IfName)
}

// Put writes r durably (see the layout), replacing the record of its
// key. Since and Boot are kept from the first write (Boot: the boot the
// attachment was made in, CurrentBoot when r has none); Updated is now.
// A file at the key's path that is not JSON, of this format, naming its
// key (a newer cninet's record, a damaged one) is never replaced: the
// error wraps ErrUnreadable and names it. (A record of this format whose
// other fields are damaged is for the caller to refuse: Of reports it.)
// The caller holds the id's lock.
func (g *Registry) Put(r *Record) error {
	k := r.Key
	if err := checkKey(k); err != nil {
		return err
	}
	path := g.path(k)
	now := time.Now().UTC()
	var buf []byte
	old, err := readDecoded(path, k, &buf, decodeHead)
	switch {
	case err == nil:
		if r.Since.IsZero() {
			// r built afresh rather than read: Since is when the key was
			// first recorded.
			r.Since = old.Since
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("recording %s: %w: %w", k, ErrUnreadable, Damaged{Path: path, Key: k, Err: err})
	}
	if r.Since.IsZero() {
		r.Since = now
	}
	if r.Boot == "" {
		r.Boot = CurrentBoot()
	}
	r.Version, r.Updated = FormatVersion, now
	raw, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("recording %s: %w", k, err)
	}
	tmp, err := g.mkdir("tmp")
	if err != nil {
		return fmt.Errorf("recording %s: %w", k, err)
	}
	if _, err := g.mkdir("attachments", k.ID, k.Network); err != nil {
		return fmt.Errorf("recording %s: %w", k, err)
	}
	if err := writeFileAtomic(tmp, path, raw); err != nil {
		return fmt.Errorf("recording %s: %w", k, err)
	}
	r.path = path
	killpoint.Reached(killpoint.Recorded)
	return nil
}

// Of returns the records of container id, sorted by network then
// interface, and the registry files of id that are no usable record.
func (g *Registry) Of(id string) ([]Record, []Damaged, error) {
	if !containerID.MatchString(id) {
		return nil, nil, fmt.Errorf("%w: container id %q", ErrInvalid, id)
	}
	var buf []byte
	return readID(g.idDir(id), id, &buf, decoding(decodeRecord))
}

// Listing is every record of the registry and every file in it that is
// no usable record.
type Listing struct {
	Records []Record
	Damaged []Damaged
}

// All reads every record, sorted by id, network and interface. A file
// that is no usable record is in Damaged; an error says a directory
// could not be read.
func (g *Registry) All() (Listing, error) {
	recs, damaged, err := readAll(g, decoding(decodeRecord))
	return Listing{Records: recs, Damaged: damaged}, err
}

// decoder decodes the record at path, of key k, from its bytes raw,
// which it must not keep.
type decoder[T any] func(raw []byte, path string, k identity.Key) (T, error)

// reader reads the record at path, of key k, buf its read buffer (reused
// from record to record).
type reader[T any] func(path string, k identity.Key, buf *[]byte) (T, error)

// decoding is the reader that reads the file whole and decodes it.
func decoding[T any](decode decoder[T]) reader[T] {
	return func(path string, k identity.Key, buf *[]byte) (T, error) { return readDecoded(path, k, buf, decode) }
}

// idRead is what readAll read of one entry of attachments/.
type idRead[T any] struct {
	recs    []T
	damaged []Damaged
	err     error
}

// readAll reads every id's directory under attachments/ and returns what
// it read in id, network and interface order. The ids are shared out
// among as many goroutines as the process runs at once: listing
// thousands of records is mostly decoding, which the CPUs can share.
func readAll[T any](g *Registry, read reader[T]) ([]T, []Damaged, error) {
	root := filepath.Join(g.dir, "attachments")
	ids, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil // nothing was ever recorded
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the host registry: %w", err)
	}
	reads := make([]idRead[T], len(ids))
	var next atomic.Int64
	readIDs := func() {
		var buf []byte
		for i := int(next.Add(1) - 1); i < len(ids); i = int(next.Add(1) - 1) {
			e := ids[i]
			if !e.IsDir() {
				reads[i].damaged = []Damaged{{Path: filepath.Join(root, e.Name()), Key: identity.Key{ID: e.Name()}, Err: errors.New("not a directory")}}
				continue
			}
			reads[i].recs, reads[i].damaged, reads[i].err = readID(filepath.Join(root, e.Name()), e.Name(), &buf, read)
		}
	}
	if len(ids) < readAloneBelow {
		readIDs()
	} else {
		var wg sync.WaitGroup
		for range min(runtime.GOMAXPROCS(0), len(ids)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				readIDs()
			}()
		}
		wg.Wait()
	}
	n := 0
	for _, r := range reads {
		n += len(r.recs)
	}
	recs := slices.Grow([]T(nil), n) // nil when there is none, as Of says it
	var damaged []Damaged
	var errs []error
	for _, r := range reads {
		recs = append(recs, r.recs...)
		damaged = append(damaged, r.damaged...)
		errs = append(errs, r.err)
	}
	return recs, damaged, errors.Join(errs...)
}

// readAloneBelow is how many ids the caller reads alone: a few
// directories and files take microseconds each, and on a busy host the
// goroutines that would share them first wait for a thread to run on (a
// wait in the kernel's run queue) longer than the reads take.
const readAloneBelow = 128

// readID reads the records under one id's directory, sorted by network
// then interface: the order os.ReadDir lists the directories and files
// that name them in. buf is the read buffer, reused from record to
// record.
func readID[T any](idDir, id string, buf *[]byte, read reader[T]) ([]T, []Damaged, error) {
	nets, err := os.ReadDir(idDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the host registry: %w", err)
	}
	var recs []T
	var damaged []Damaged
	var errs []error
	for _, n := range nets {
		netDir := filepath.Join(idDir, n.Name())
		if !n.IsDir() {
			damaged = append(damaged, Damaged{Path: netDir, Key: identity.Key{Network: n.Name(), ID: id}, Err: errors.New("not a directory")})
			continue
		}
		files, err := os.ReadDir(netDir)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since the id's directory was read: another process's detach
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the host registry: %w", err))
			continue
		}
		for _, f := range files {
			path := filepath.Join(netDir, f.Name())
			k := identity.Key{Network: n.Name(), ID: id, IfName: f.Name()}
			r, err := read(path, k, buf)
			if errors.Is(err, os.ErrNotExist) {
				continue // removed since its directory was read
			}
			if err != nil {
				damaged = append(damaged, Damaged{Path: path, Key: k, Err: err})
				continue
			}
			recs = append(recs, r)
		}
	}
	return recs, damaged, errors.Join(errs...)
}

// readDecoded reads the file at path into *buf and decodes it.
func readDecoded[T any](path string, k identity.Key, buf *[]byte, decode decoder[T]) (T, error) {
	raw, err := readFile(path, *buf)
	*buf = raw
	if err != nil {
		var zero T
		return zero, err
	}
	return decode(raw, path, k)
}

// readRecord reads one record, which must be of this format version and
// name the key its path does.
func readRecord(path string, k identity.Key) (Record, error) {
	var buf []byte
	return readDecoded(path, k, &buf, decodeRecord)
}

// decodeRecord decodes one record (a decoder).
func decodeRecord(raw []byte, path string, k identity.Key) (Record, error) {
	var r Record
	if err := checkDecoded(raw, json.Unmarshal(raw, &r), r.Version, r.Key, k); err != nil {
		return Record{}, err
	}
	r.path = path
	return r, nil
}

// recordHead is what a write or a removal needs of the record it
// replaces: that it is one of this format, of its key, and when it was
// first written. The rest is not kept; encoding/json still checks that
// the whole file is JSON. (What decodes as a head but not as a Record,
// a field of another shape in a record of this format, is damage that
// Of and All report, and that the operations refuse before they write.)
type recordHead struct {
	Version int `json:"version"`
	identity.Key
	Since time.Time `json:"since"`
}

// decodeHead decodes a record's head (a decoder).
func decodeHead(raw []byte, _ string, k identity.Key) (recordHead, error) {
	var h recordHead
	err := checkDecoded(raw, json.Unmarshal(raw, &h), h.Version, h.Key, k)
	return h, err
}

// checkDecoded judges a decoded record, whatever its Go type: its
// decoding's error decodeErr, and its format version and the key it names
// against k, its path's. The record must be of this format version and
// name the key its path does.
func checkDecoded(raw []byte, decodeErr error, version int, named, k identity.Key) error {
	if decodeErr != nil {
		// A later format may have changed a field's shape: say so when
		// its version can be read.
		var v struct {
			Version int `json:"version"`
		}
		if json.Unmarshal(raw, &v) == nil && v.Version > FormatVersion {
			return fmt.Errorf("record format %d, newer than this cninet's %d: written by a newer cninet (%w)", v.Version, FormatVersion, decodeErr)
		}
		return fmt.Errorf("corrupt record: %w", decodeErr)
	}
	switch {
	case version > FormatVersion:
		return fmt.Errorf("record format %d, newer than this cninet's %d: written by a newer cninet", version, FormatVersion)
	case version < 1:
		return fmt.Errorf("corrupt record: format version %d", version)
	case named != k:
		return fmt.Errorf("corrupt record: it names %s, its path %s", named, k)
	}
	return nil
}

// Remove removes k's record, durably, and its id's directories when they
// are empty. A record already gone is no error; a file at k's path that
// is not JSON, of this format, naming k is never removed (the error wraps
// ErrUnreadable and names it; see Put). The caller holds the id's lock.
func (g *Registry) Remove(k identity.Key) error {
	if err := checkKey(k); err != nil {
		return err
	}
	path := g.path(k)
	var buf []byte
	if _, err := readDecoded(path, k, &buf, decodeHead); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the record of %s: %w: %w", k, ErrUnreadable, Damaged{Path: path, Key: k, Err: err})
	}
	if err := step("remove"); err != nil {
		return err
	}
	if err := fsys.remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the record of %s: %w", k, err)
	}
	if err := step("unlinked"); err != nil {
		return err
	}
	if err := fsys.syncDir(filepath.Dir(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the record of %s: %w", k, err)
	}
	// Empty directories go too; one that is not empty (another record)
	// stays, which is no failure. A directory left behind by a kill
	// here is empty, which a reader takes for no record.
	if fsys.remove(filepath.Dir(path)) != nil {
		return nil
	}
	if err := step("unlinked dir"); err != nil {
		return err
	}
	if fsys.remove(g.idDir(k.ID)) != nil {
		_ = fsys.syncDir(g.idDir(k.ID))
		return nil
	}
	if err := step("unlinked dir"); err != nil {
		return err
	}
	_ = fsys.syncDir(filepath.Join(g.dir, "attachments"))
	return nil
}

// staleTempAge is how old a file in tmp/ must be before it is taken for
// one a killed write left: no write takes that long.
const staleTempAge = 10 * time.Minute

// RemoveStaleTemps removes what killed writes left in tmp/ and returns
// how many files it removed. GC calls it.
func (g *Registry) RemoveStaleTemps() int {
	dir := filepath.Join(g.dir, "tmp")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() && time.Since(info.ModTime()) > staleTempAge {
			if fsys.remove(filepath.Join(dir, e.Name())) == nil {
				n++
			}
		}
	}
	if n > 0 {
		_ = fsys.syncDir(dir)
	}
	return n
}
