package footprint

import (
	"net/netip"
	"slices"

	"github.com/seed1280861d/cninet/internal/hostwork"
)

// hostFiles is what the files on the host say about attachments:
// host-local's reservations, libcni's cached results and cninet's intent
// records.
type hostFiles struct {
	reservations []reservation
	cached       []cachedResult
	records      []intentRecord
}

// claimsOfFiles returns what the set's files of one kind (of, from the
// files read before the DEL and now) say its attachments held (addrs).
func claimsOfFiles[F interface{ att() Attachment }](v *view, set attSet, of func(hostFiles) []F, addrs func(F) []netip.Addr) []claim {
	var out []claim
	for _, files := range []hostFiles{v.prior, v.files} {
		for _, f := range of(files) {
			if set[f.att()] {
				for _, a := range addrs(f) {
					out = append(out, claim{a, f.att()})
				}
			}
		}
	}
	return out
}

// scanAllFiles reads every reservation and cached result of every known
// network (a GC).
func scanAllFiles(v *view) hostFiles {
	var f hostFiles
	for _, n := range sortedNets(v.nets) {
		f.reservations = append(f.reservations, readAllReservations(v, n)...)
		f.cached = append(f.cached, readAllCached(v, n)...)
		f.records = append(f.records, readAllRecords(v, n)...)
	}
	return f
}

// scanFilesOf reads the files of the set's attachments only. An
// attachment's cached result names its addresses, so only those
// reservation files are read; one without a readable one (a failed ADD is
// not cached; a crash can leave it empty), or whose cached result names
// an address host-local did not reserve for it (stale: from before a
// reboot, and a failed ADD since may hold another), costs one read of its
// network's IPAM directories.
func scanFilesOf(v *view, set attSet) hostFiles {
	var f hostFiles
	for _, a := range set.sorted() {
		n := v.nets[a.Network]
		end := v.meter.Begin(hostwork.File, "files of "+a.ID, false)
		if r, ok := readRecordOf(v, n, a.ID); ok {
			f.records = append(f.records, r)
		}
		first := len(f.cached)
		for _, ifName := range n.ifNames() {
			if r, ok := readCachedAt(v, n, a.ID, ifName); ok {
				f.cached = append(f.cached, r)
			}
		}
		firstReservation, stale := len(f.reservations), false
		for _, cached := range f.cached[first:] {
			for _, addr := range cached.addrs {
				reserved := false
				for _, dir := range n.IPAMDirs {
					if r, err := readReservation(n.Name, dir, addr); err == nil && r.id == a.ID {
						f.reservations, reserved = append(f.reservations, r), true
					}
				}
				stale = stale || (!reserved && len(n.IPAMDirs) > 0)
			}
		}
		end(0, 0)
		if stale || !slices.ContainsFunc(f.cached[first:], func(c cachedResult) bool { return len(c.addrs) > 0 }) {
			f.reservations = f.reservations[:firstReservation] // read again, all of them
			for _, r := range readAllReservations(v, n) {
				if r.id == a.ID {
					f.reservations = append(f.reservations, r)
				}
			}
		}
	}
	return f
}

// of returns the files of the set's attachments.
func (f hostFiles) of(set attSet) hostFiles {
	var out hostFiles
	for _, r := range f.reservations {
		if set[r.att()] {
			out.reservations = append(out.reservations, r)
		}
	}
	for _, c := range f.cached {
		if set[c.att()] {
			out.cached = append(out.cached, c)
		}
	}
	for _, r := range f.records {
		if set[r.att()] {
			out.records = append(out.records, r)
		}
	}
	return out
}

// still returns what of f is still there for the set: reservations still
// naming their attachment, cached results still present.
func (f hostFiles) still(set attSet) hostFiles {
	var out hostFiles
	for _, r := range f.reservations {
		if id, err := reservationHolder(r.path); err == nil && id == r.id && set[r.att()] {
			out.reservations = append(out.reservations, r)
		}
	}
	for _, c := range f.cached {
		if set[c.att()] && exists(c.path) {
			out.cached = append(out.cached, c)
		}
	}
	for _, r := range f.records {
		if set[r.att()] && exists(r.path) {
			out.records = append(out.records, r)
		}
	}
	return out
}

// addrsOf returns the addresses the files name for the set.
func (f hostFiles) addrsOf(set attSet) []netip.Addr {
	var addrs []netip.Addr
	for _, r := range f.reservations {
		if set[r.att()] {
			addrs = append(addrs, r.addr)
		}
	}
	for _, c := range f.cached {
		if set[c.att()] {
			addrs = append(addrs, c.addrs...)
		}
	}
	for _, r := range f.records {
		if set[r.att()] {
			addrs = append(addrs, r.addrs...)
		}
	}
	return addrs
}

// addrsByAttachment returns the addresses the files name for each of
// the set's attachments.
func (f hostFiles) addrsByAttachment(set attSet) map[Attachment][]netip.Addr {
	out := map[Attachment][]netip.Addr{}
	for _, r := range f.reservations {
		if set[r.att()] {
			out[r.att()] = append(out[r.att()], r.addr)
		}
	}
	for _, c := range f.cached {
		if set[c.att()] {
			out[c.att()] = append(out[c.att()], c.addrs...)
		}
	}
	for _, r := range f.records {
		if set[r.att()] {
			out[r.att()] = append(out[r.att()], r.addrs...)
		}
	}
	return out
}

// reservedAddr is one address host-local reserved for one attachment.
type reservedAddr struct {
	att  Attachment
	addr netip.Addr
}

// reserved returns the addresses f's reservations name, with the
// attachment each is reserved for: indexed once, so that asking about
// every cached address of a sweep costs one lookup each, not a scan of
// every reservation.
func (f hostFiles) reserved() map[reservedAddr]bool {
	out := make(map[reservedAddr]bool, len(f.reservations))
	for _, r := range f.reservations {
		out[reservedAddr{r.att(), r.addr}] = true
	}
	return out
}

func sortedNets(nets map[string]Network) []Network {
	out := make([]Network, 0, len(nets))
	for _, name := range sortedKeys(nets) {
		out = append(out, nets[name])
	}
	return out
}
