package footprint

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet/internal/hostwork"
)

// applyFiles removes the planned files. Reservations go under
// host-local's own lock on their directory, each re-read first: between
// the read and now host-local may have handed the address to somebody
// else. A file already gone is not reported.
func applyFiles(v *view, changes []fileChange, rep *Report) {
	// In place, by lock directory (none first): a sweep plans tens of
	// thousands, and its plan is not read again.
	slices.SortStableFunc(changes, func(a, b fileChange) int { return strings.Compare(a.lockDir, b.lockDir) })
	for len(changes) > 0 {
		dir := changes[0].lockDir
		n := slices.IndexFunc(changes, func(c fileChange) bool { return c.lockDir != dir })
		if n < 0 {
			n = len(changes)
		}
		if dir == "" {
			for _, c := range changes[:n] {
				removeFile(v, c, rep)
			}
		} else {
			removeReservations(v, dir, changes[:n], rep)
		}
		changes = changes[n:]
	}
}

func removeReservations(v *view, dir string, cs []fileChange, rep *Report) {
	end := v.meter.Begin(hostwork.LockWait, "host-local's lock on "+dir, false)
	unlock, err := lockDir(v.ctx, dir)
	end(0, 0)
	if err != nil {
		v.errs.add(fmt.Errorf("locking IPAM directory %s: %w", dir, err))
		return
	}
	defer unlock()
	for _, c := range cs {
		if id, err := reservationHolder(c.path); err != nil || id != c.att.ID {
			continue // released or re-reserved meanwhile: not ours any more
		}
		removeFile(v, c, rep)
	}
}

func removeFile(v *view, c fileChange, rep *Report) {
	end := v.meter.Begin(hostwork.Write, "removing "+c.path, false)
	err := os.Remove(c.path)
	end(0, 0)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			v.errs.add(fmt.Errorf("removing %s: %w", c.kind, err))
		}
		return
	}
	rep.note(c.att, entry{detail: c.path, shape: fileShape(c.kind)})
}

// applyLinks deletes the planned network devices.
func applyLinks(v *view, changes []linkChange, rep *Report) {
	for _, c := range changes {
		if v.links == nil {
			return
		}
		end := v.meter.Begin(hostwork.Write, "deleting device "+c.name, false)
		removed, err := v.links.DeleteLink(c.name)
		end(0, 0)
		if err != nil {
			v.errs.add(fmt.Errorf("deleting network device %s: %w", c.name, err))
			continue
		}
		if removed {
			rep.note(c.att, entry{detail: c.name, shape: shapeLink})
		}
	}
}
