package footprint

import (
	"net/netip"
	"os"
)

// hostFiles is what the files on the host say about attachments:
// host-local reservations and libcni's cached results.
type hostFiles struct {
	reservations []reservation
	cached       []cachedResult
}

// scanAllFiles reads every reservation and cached result of the network.
func (c *Cleaner) scanAllFiles() hostFiles {
	var f hostFiles
	f.reservations = c.readAllReservations()
	for _, p := range cachePaths(c.net.CacheDir, c.net.Name) {
		c.addCached(&f, p)
	}
	return f
}

// scanFilesOf reads the files of ids only. An id's cached result names its
// addresses, so only those reservation files are read; an id without one
// (a failed ADD is not cached) costs one read of the IPAM directories.
func (c *Cleaner) scanFilesOf(ids idSet) hostFiles {
	var f hostFiles
	uncached := false
	for _, id := range sortedIDs(ids) {
		n := len(f.cached)
		for _, ifName := range c.net.ifNames() {
			c.addCached(&f, cachePath(c.net.CacheDir, c.net.Name, id, ifName))
		}
		if len(f.cached) == n {
			uncached = true
			continue
		}
		for _, cached := range f.cached[n:] {
			for _, addr := range cached.addrs {
				for _, dir := range c.net.IPAMDirs {
					if r, err := readReservation(dir, addr); err == nil && r.id == id {
						f.reservations = append(f.reservations, r)
					}
				}
			}
		}
	}
	if uncached {
		f.reservations = f.reservations[:0]
		for _, r := range c.readAllReservations() {
			if ids[r.id] {
				f.reservations = append(f.reservations, r)
			}
		}
	}
	return f
}

func (c *Cleaner) readAllReservations() []reservation {
	var all []reservation
	for _, dir := range c.net.IPAMDirs {
		rs, err := readReservations(dir)
		if err != nil {
			c.fail(err)
		}
		all = append(all, rs...)
	}
	return all
}

func (c *Cleaner) addCached(f *hostFiles, path string) {
	r, ok, err := readCachedResult(path, c.net.Name)
	if err != nil {
		c.fail(err)
	}
	if ok {
		f.cached = append(f.cached, r)
	}
}

// refresh returns what of f still stands for ids: their reservations
// still naming them, their cached results still present.
func (f hostFiles) refresh(ids idSet) hostFiles {
	var out hostFiles
	for _, r := range f.reservations {
		if id, err := reservationHolder(r.path); err == nil && ids[r.id] && id == r.id {
			out.reservations = append(out.reservations, r)
		}
	}
	for _, c := range f.cached {
		if _, err := os.Stat(c.path); err == nil && ids[c.id] {
			out.cached = append(out.cached, c)
		}
	}
	return out
}

// addrsOf returns the addresses the files name for ids.
func (f hostFiles) addrsOf(ids idSet) []netip.Addr {
	var addrs []netip.Addr
	for _, r := range f.reservations {
		if ids[r.id] {
			addrs = append(addrs, r.addr)
		}
	}
	for _, r := range f.cached {
		if ids[r.id] {
			addrs = append(addrs, r.addrs...)
		}
	}
	return addrs
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

// evidence is what one family's cleanup knows about addresses: which
// attachment of ids provably held each, and which are held by others.
type evidence struct {
	proven map[netip.Addr]string
	others map[netip.Addr]bool
	owns   map[netip.Addr]string // owned, once asked for
}

// evidence starts a family's evidence from the files: what they said
// before DEL and what they say now.
func (c *Cleaner) evidence(ids idSet, v6 bool) *evidence {
	ev := &evidence{proven: map[netip.Addr]string{}, others: map[netip.Addr]bool{}}
	for _, f := range []hostFiles{c.prior, c.files} {
		for _, r := range f.reservations {
			switch {
			case r.addr.Is6() != v6:
			case ids[r.id]:
				ev.proven[r.addr] = r.id
			default:
				ev.others[r.addr] = true
			}
		}
		for _, r := range f.cached {
			for _, a := range r.addrs {
				if a.Is6() == v6 && ids[r.id] {
					ev.proven[a] = r.id
				}
			}
		}
	}
	return ev
}

// owned returns the proven addresses that nobody else holds now. It is
// computed once, after all evidence is in.
func (ev *evidence) owned(ipamDirs []string, ids idSet) map[netip.Addr]string {
	if ev.owns != nil {
		return ev.owns
	}
	owned := map[netip.Addr]string{}
	for a, id := range ev.proven {
		if !ev.others[a] && !heldByOther(ipamDirs, a, ids) {
			owned[a] = id
		}
	}
	ev.owns = owned
	return owned
}
