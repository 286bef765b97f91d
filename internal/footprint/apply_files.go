package footprint

import (
	"errors"
	"fmt"
	"os"
)

// applyFiles removes the planned files. Reservations go under
// host-local's own lock on their directory, each re-read first: between
// the read and now host-local may have handed the address to somebody
// else. A file already gone is not reported.
func applyFiles(v *view, changes []fileChange, rep *Report) {
	byDir := map[string][]fileChange{}
	for _, c := range changes {
		if c.lockDir == "" {
			removeFile(v, c, rep)
			continue
		}
		byDir[c.lockDir] = append(byDir[c.lockDir], c)
	}
	for dir, cs := range byDir {
		removeReservations(v, dir, cs, rep)
	}
}

func removeReservations(v *view, dir string, cs []fileChange, rep *Report) {
	unlock, err := lockDir(v.ctx, dir)
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
	if err := os.Remove(c.path); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			v.errs.add(fmt.Errorf("removing %s: %w", c.kind, err))
		}
		return
	}
	rep.note(false, c.att, entry{detail: c.path, shape: fileShape(c.kind)})
}

// applyLinks deletes the planned network devices.
func applyLinks(v *view, changes []linkChange, rep *Report) {
	for _, c := range changes {
		if v.links == nil {
			return
		}
		removed, err := v.links.DeleteLink(c.name)
		if err != nil {
			v.errs.add(fmt.Errorf("deleting network device %s: %w", c.name, err))
			continue
		}
		if removed {
			rep.note(false, c.att, entry{detail: c.name, shape: shapeLink})
		}
	}
}
