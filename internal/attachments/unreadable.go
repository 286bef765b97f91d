package attachments

import (
	"errors"
	"fmt"

	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

// A registry file that this cninet cannot read (damaged, or written by a
// newer cninet in a later format) stands where an attachment's record
// belongs. What it holds may be the only proof of that attachment's
// state, and whose it is: so it is kept byte for byte (the registry
// refuses to replace or remove it), and no operation acts on its
// attachment. Setup and Connect of that attachment fail before any
// plugin runs; Teardown, Disconnect and GC leave the attachment alone
// and report the file.

// UnreadableAt returns the registry file that stands where the record of
// id in network as ifName belongs and cannot be read, or nil.
func (r *Registry) UnreadableAt(id, network, ifName string) (*registry.Damaged, error) {
	_, damaged, err := r.Store.Of(id)
	if err != nil {
		return nil, fmt.Errorf("%w: reading the host registry: %w", errs.IO, err)
	}
	k := identity.Key{Network: network, ID: id, IfName: ifName}
	for i := range damaged {
		if damaged[i].Covers(k) {
			return &damaged[i], nil
		}
	}
	return nil, nil
}

// RefuseUnreadable fails, before any plugin runs, an ADD of id in
// network as ifName whose record cannot be read.
func (r *Registry) RefuseUnreadable(id, network, ifName string) error {
	d, err := r.UnreadableAt(id, network, ifName)
	if err != nil {
		return err
	}
	if d != nil {
		return fmt.Errorf("%w: allocation %s in network %q as %s: %s is no record this cninet can read (%w); kept, and nothing was attached: upgrade cninet, or remove the file if it is damaged",
			errs.RecordUnreadable, id, network, ifName, d.Path, d.Err)
	}
	return nil
}

// UnreadableError is the error of a detach that left the attachments of
// files alone: nil without any.
func UnreadableError(id string, files []registry.Damaged) error {
	if len(files) == 0 {
		return nil
	}
	damaged := make([]error, len(files))
	for i, d := range files {
		damaged[i] = d
	}
	return fmt.Errorf("%w: allocation %s: %d registry file(s) this cninet cannot read were kept, and their attachments left alone (upgrade cninet, or remove a damaged file and detach again): %w",
		errs.RecordUnreadable, id, len(files), errors.Join(damaged...))
}

// withoutUnreadable drops from found the attachments whose record is one
// of the files damaged.
func withoutUnreadable(found []Found, damaged []registry.Damaged) []Found {
	if len(damaged) == 0 {
		return found
	}
	out := found[:0:0]
	for _, fa := range found {
		k := identity.Key{Network: fa.Att.Name(), ID: fa.Req.ID, IfName: fa.Att.IfName}
		covered := false
		for _, d := range damaged {
			covered = covered || d.Covers(k)
		}
		if !covered {
			out = append(out, fa)
		}
	}
	return out
}
