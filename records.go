package cninet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/registry"
)

// AttachmentRecord is one attachment as the host registry records it.
type AttachmentRecord struct {
	Owner, Network, ID, IfName, NetNS string
	// RuntimeID is the container id the runtime named, where the plugins
	// know the attachment by ID instead (cninet daemon's delegate id of a
	// container's second interface on one network); "": ID is the
	// runtime's.
	RuntimeID string
	// State is "adding" (its ADD began), "attached" or "detaching" (its
	// DEL began; the next Teardown or GC of its owner finishes it), or
	// "unreadable" (see Unreadable).
	State     string
	Addresses []netip.Addr
	Ports     []cni.PortMapping
	Since     time.Time
	// Unreadable, when set, says why the registry file that stands for
	// this attachment cannot be read (damaged, or a newer cninet's
	// record), naming the file; State is then "unreadable", and of the
	// rest only what the file's path says is known (ID, and Network and
	// IfName unless a directory is what is damaged). The file is kept,
	// and no operation acts on the attachment (ErrRecordUnreadable).
	Unreadable string
}

// unreadableRecord is the AttachmentRecord of a damaged registry file.
func unreadableRecord(d registry.Damaged) AttachmentRecord {
	return AttachmentRecord{ID: d.ID, Network: d.Key.Network, IfName: d.Key.IfName, State: "unreadable", Unreadable: d.Error()}
}

// sortRecords sorts a listing by id, network and interface.
func sortRecords(recs []AttachmentRecord) {
	slices.SortStableFunc(recs, func(a, b AttachmentRecord) int {
		return cmp.Or(strings.Compare(a.ID, b.ID), strings.Compare(a.Network, b.Network), strings.Compare(a.IfName, b.IfName))
	})
}

// listAttachments is Configurator.Attachments.
func listAttachments(r *attachments.Registry, ids []string) ([]AttachmentRecord, error) {
	if len(ids) > 0 {
		return listAttachmentsOf(r, ids)
	}
	all, err := r.Store.Summaries() // what a listing shows: no record's conflist decoded
	out := make([]AttachmentRecord, 0, len(all.Summaries)+len(all.Damaged))
	for _, rec := range all.Summaries {
		out = append(out, attachmentRecord(rec))
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range all.Damaged {
		errs = append(errs, d)
		out = append(out, unreadableRecord(d))
	}
	if len(all.Damaged) > 0 {
		sortRecords(out)
	}
	return out, listingError(errs)
}

// listAttachmentsOf is Attachments of ids: each id's records, in the order
// of ids (each id's sorted by network and interface), an id given twice
// listed once.
func listAttachmentsOf(r *attachments.Registry, ids []string) ([]AttachmentRecord, error) {
	for _, id := range ids {
		if err := checkContainerID(id); err != nil {
			return nil, err
		}
	}
	var out []AttachmentRecord
	var errs []error
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		recs, damaged, err := r.Store.Of(id)
		if err != nil {
			errs = append(errs, err)
		}
		var ofID []AttachmentRecord
		for _, rec := range recs {
			ofID = append(ofID, attachmentRecord(rec.Summary()))
		}
		for _, d := range damaged {
			errs = append(errs, d)
			ofID = append(ofID, unreadableRecord(d))
		}
		if len(damaged) > 0 {
			sortRecords(ofID)
		}
		out = append(out, ofID...)
	}
	return out, listingError(errs)
}

// attachmentRecord is the AttachmentRecord of a record's summary.
func attachmentRecord(rec registry.Summary) AttachmentRecord {
	r := AttachmentRecord{Owner: rec.Owner, Network: rec.Network, ID: rec.ID, IfName: rec.IfName, RuntimeID: rec.RuntimeID,
		NetNS: rec.NetNS, State: string(rec.State), Addresses: rec.Addresses, Since: rec.Since}
	if raw, ok := rec.Capabilities[catalog.CapabilityPortMappings]; ok {
		_ = json.Unmarshal(raw, &r.Ports)
	}
	return r
}

// listingError is the ErrIO error of a listing's unreadable parts, or nil.
func listingError(errs []error) error {
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrIO, errors.Join(errs...))
	}
	return nil
}

// WithOwner returns ctx for operations on behalf of owner instead of
// Config.Owner: what they record is owner's, and a GC under it collects
// only owner's attachments. A program that serves several owners with one
// Configurator (cninet daemon serves each CNI runtime as an owner of its
// own) uses it; others set Config.Owner. An empty owner changes nothing.
func WithOwner(ctx context.Context, owner string) context.Context {
	return attachments.WithOwner(ctx, owner)
}
