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
func applyFiles(v *view, changes []fileChange, rep *report) {
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

func removeReservations(v *view, dir string, cs []fileChange, rep *report) {
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

func removeFile(v *view, c fileChange, rep *report) {
	if err := os.Remove(c.path); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			v.errs.add(fmt.Errorf("removing %s: %w", c.kind, err))
		}
		return
	}
	rep.note(false, Item{Kind: c.kind, ID: c.att.ID, Network: c.att.Network, Backend: "files", Detail: c.path})
}

// applyLinks deletes the planned network devices.
func applyLinks(v *view, changes []linkChange, rep *report) {
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
			rep.note(false, Item{Kind: KindLink, ID: c.att.ID, Network: c.att.Network, Backend: "links", Detail: "device " + c.name})
		}
	}
}
