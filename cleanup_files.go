package cninet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// hostFiles is what the files on the host say about attachments: host-local
// reservations and libcni's cached results.
type hostFiles struct {
	reservations []reservation
	cached       []cachedResult
}

type reservation struct {
	dir, path, id string
	addr          netip.Addr
}

type cachedResult struct {
	path, id string
	addrs    []netip.Addr
}

// scanFiles reads the reservations in every IPAM dir and the cached
// results of ids (nil ids: of every attachment of the network).
func (c *cleaner) scanFiles(ids []string) hostFiles {
	var f hostFiles
	for _, dir := range c.info.ipamDirs {
		rs, err := readReservations(dir)
		if err != nil {
			c.fail(err)
		}
		f.reservations = append(f.reservations, rs...)
	}
	results := filepath.Join(c.cacheDir, "results")
	var paths []string
	if ids == nil {
		paths, _ = filepath.Glob(filepath.Join(results, globEscape(c.info.name)+"-*"))
	}
	for _, id := range ids {
		paths = append(paths, filepath.Join(results, fmt.Sprintf("%s-%s-%s", c.info.name, id, c.ifName)))
	}
	for _, p := range paths {
		if r, ok := c.readCachedResult(p); ok {
			f.cached = append(f.cached, r)
		}
	}
	return f
}

func globEscape(s string) string {
	return strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`).Replace(s)
}

// readReservations lists host-local's reservation files in dir: files
// named by an IP whose first line is the container id.
func readReservations(dir string) ([]reservation, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading IPAM directory: %w", err)
	}
	var rs []reservation
	var errs []error
	for _, e := range entries {
		addr, err := netip.ParseAddr(e.Name())
		if err != nil || e.IsDir() {
			continue // lock, last_reserved_ip.N and anything else not a reservation
		}
		path := filepath.Join(dir, e.Name())
		id, err := firstLine(path)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		rs = append(rs, reservation{dir: dir, path: path, id: id, addr: addr.Unmap()})
	}
	return rs, errors.Join(errs...)
}

// firstLine returns the first line of a host-local reservation file, which
// is the container id (newer host-local versions add "\r\n<ifname>").
func firstLine(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan()
	return strings.TrimRight(s.Text(), "\r"), s.Err()
}

// readCachedResult parses libcni's cache file; ok is false when it is
// absent or belongs to another network.
func (c *cleaner) readCachedResult(path string) (cachedResult, bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			c.fail(fmt.Errorf("reading cached result: %w", err))
		}
		return cachedResult{}, false
	}
	var cached struct {
		ContainerID string `json:"containerId"`
		NetworkName string `json:"networkName"`
		Result      struct {
			IPs []struct {
				Address string `json:"address"`
			} `json:"ips"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &cached); err != nil || cached.NetworkName != c.info.name || cached.ContainerID == "" {
		return cachedResult{}, false // not provably this network's: leave it
	}
	r := cachedResult{path: path, id: cached.ContainerID}
	for _, ip := range cached.Result.IPs {
		if p, err := netip.ParsePrefix(ip.Address); err == nil {
			r.addrs = append(r.addrs, p.Addr().Unmap())
		}
	}
	return r, true
}

// refresh re-reads what the scan found for ids: their reservations and
// cached results that still exist, and who holds their addresses now.
func (f hostFiles) refresh(ids map[string]bool) hostFiles {
	var out hostFiles
	for _, r := range f.reservations {
		if ids[r.id] {
			if id, err := firstLine(r.path); err == nil {
				out.reservations = append(out.reservations, reservation{dir: r.dir, path: r.path, id: id, addr: r.addr})
			}
		}
	}
	for _, c := range f.cached {
		if _, err := os.Stat(c.path); err == nil && ids[c.id] {
			out.cached = append(out.cached, c)
		}
	}
	return out
}

// heldByOther reports whether a host-local reservation of the network
// gives addr to an attachment outside ids right now. It reads the one file
// that would say so, in every IPAM directory.
func (c *cleaner) heldByOther(addr netip.Addr, ids map[string]bool) bool {
	for _, dir := range c.info.ipamDirs {
		holder, err := firstLine(filepath.Join(dir, addr.String()))
		if err == nil && !ids[holder] {
			return true
		}
	}
	return false
}

// ids returns every attachment id the files name.
func (f hostFiles) ids() []string {
	var ids []string
	for _, r := range f.reservations {
		ids = append(ids, r.id)
	}
	for _, r := range f.cached {
		ids = append(ids, r.id)
	}
	return ids
}

// addresses adds to proven the addresses of one family that the files say
// ids held, and to others those that other attachments hold.
func (f hostFiles) addresses(ids map[string]bool, v6 bool, proven map[netip.Addr]string, others map[netip.Addr]bool) {
	for _, r := range f.reservations {
		switch {
		case r.addr.Is6() != v6:
		case ids[r.id]:
			proven[r.addr] = r.id
		default:
			others[r.addr] = true
		}
	}
	for _, r := range f.cached {
		for _, a := range r.addrs {
			if a.Is6() == v6 && ids[r.id] {
				proven[a] = r.id
			}
		}
	}
}

// removeFiles removes the reservations and cached results of ids. Each
// reservation is re-read under host-local's own lock first: between the
// scan and now host-local may have handed the address to somebody else.
func (c *cleaner) removeFiles(ids map[string]bool) {
	byDir := map[string][]reservation{}
	for _, r := range c.files.reservations {
		if ids[r.id] {
			byDir[r.dir] = append(byDir[r.dir], r)
		}
	}
	for dir, rs := range byDir {
		c.removeReservations(dir, rs)
	}
	for _, r := range c.files.cached {
		if !ids[r.id] {
			continue
		}
		if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.fail(fmt.Errorf("removing cached result: %w", err))
			continue
		}
		c.noteRemoved(GCCachedResult, r.id, r.path)
	}
}

func (c *cleaner) removeReservations(dir string, rs []reservation) {
	unlock, err := lockDir(dir)
	if err != nil {
		c.fail(fmt.Errorf("locking IPAM directory %s: %w", dir, err))
		return
	}
	defer unlock()
	for _, r := range rs {
		if id, err := firstLine(r.path); err != nil || id != r.id {
			continue // released or re-reserved meanwhile: not ours any more
		}
		if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.fail(fmt.Errorf("removing reservation: %w", err))
			continue
		}
		c.noteRemoved(GCReservation, r.id, r.path)
	}
}
