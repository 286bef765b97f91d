package registry

import (
	"sync"
	"time"

	"github.com/seed1280861d/cninet/internal/identity"
)

// cacheSettle is how old a record file must be, by its change and
// modification times, before a RecordCache keeps what it decoded from
// it. A file written within the file system's clock tick of a read can
// be written again with the same times; one older than this cannot be
// replaced without its stamp changing (a rename gives a new inode, a
// write a new change time).
const cacheSettle = 2 * time.Second

// RecordCache keeps the records a read decoded, by the identity of their
// files (device, inode, size, modification and change times), so that
// the next All through it decodes only the files written since: a stat
// instead of a read and a decode for every record that did not change.
// The repair watcher reads every record each pass; on a quiet host of
// many workloads, decoding them was most of a pass.
//
// What All returns through it shares its slices and maps with later
// reads: read them, do not change them. A RecordCache is safe for
// concurrent use; the zero value is empty and ready.
type RecordCache struct {
	mu    sync.Mutex
	files map[string]cachedRecord // by path, as the last read found them
	next  map[string]cachedRecord // what the read under way found
}

// cachedRecord is a record and the stamp of the file it was decoded from.
type cachedRecord struct {
	stamp fileStamp
	rec   *Record
}

// AllCached is All through c: the records whose files are as c last saw
// them are not read again.
func (g *Registry) AllCached(c *RecordCache) (Listing, error) { return g.allCached(c, time.Now()) }

// allCached is AllCached at now.
func (g *Registry) allCached(c *RecordCache, now time.Time) (Listing, error) {
	c.mu.Lock()
	defer c.mu.Unlock() // one read through c at a time: next is its own
	c.next = make(map[string]cachedRecord, len(c.files))
	recs, damaged, err := readAll(g, c.reader(now))
	c.files, c.next = c.next, nil // a file no longer there is forgotten
	return Listing{Records: recs, Damaged: damaged}, err
}

// reader reads a record through c: decoded again only when its file's
// stamp is not the one c kept. now is when the read began.
func (c *RecordCache) reader(now time.Time) reader[Record] {
	var mu sync.Mutex // readAll's goroutines share c.files (read) and c.next
	return func(path string, k identity.Key, buf *[]byte) (Record, error) {
		stamp, ok, err := stampOf(path)
		if err != nil {
			return Record{}, err
		}
		if ok {
			mu.Lock()
			kept, found := c.files[path]
			if found && kept.stamp == stamp {
				c.next[path] = kept
				mu.Unlock()
				return *kept.rec, nil
			}
			mu.Unlock()
		}
		r, err := readDecoded(path, k, buf, decodeRecord)
		if err != nil || !ok || !stamp.settled(now) {
			return r, err
		}
		// Read after the stat: a file replaced in between has another
		// stamp, and is read again next time.
		mu.Lock()
		c.next[path] = cachedRecord{stamp: stamp, rec: &r}
		mu.Unlock()
		return r, nil
	}
}

// fileStamp is what identifies one version of a file without reading it.
type fileStamp struct {
	dev, ino, size uint64
	mtime, ctime   int64 // nanoseconds since the epoch
}

// settled reports whether the file was last written cacheSettle or more
// before now.
func (s fileStamp) settled(now time.Time) bool {
	limit := now.Add(-cacheSettle).UnixNano()
	return s.mtime <= limit && s.ctime <= limit
}
