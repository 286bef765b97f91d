package thick

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/admission"
)

// A runtime may attach one container to one network under several
// interface names (CNI_IFNAME eth0, then net1). The plugins cannot tell
// such attachments apart: the bridge plugin names its masquerade chain,
// and portmap its chains and nftables comments, after the network and
// the container id alone, so one interface's DEL would remove the
// other's rules. The delegate's plugins (and libcni's cache, and the host
// registry) therefore know the second and later interfaces of a
// container on a network under an id of their own, the delegate id:
// the container id, a dot, and the interface name ("c1.net1"), or, for
// an interface name that a container id cannot hold, two dots and a hash
// of it. The first interface keeps the container id, so an attachment
// made with one interface is what it always was.

// idSafeIfName matches the interface names that make a container id
// as they are: no dot, so that "<id>.<name>" never reads as the hashed form.
var idSafeIfName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// delegateIDOf is the id under which the plugins know the attachment of
// container id under ifName when the container's id is taken in that
// network by another of its interfaces.
func delegateIDOf(id, ifName string) string {
	if idSafeIfName.MatchString(ifName) {
		return id + "." + ifName
	}
	sum := sha256.Sum256([]byte(ifName))
	return id + ".." + hex.EncodeToString(sum[:8])
}

// delegateID returns the id under which the delegate's plugins know (or,
// for an ADD, will know) the attachment of container id to network as
// ifName. The interface keeps the id under which a record of this
// container names it in this network, or under which libcni's cache
// holds it there (an attachment from before the registry, or whose
// record cannot be read). Otherwise the container id is used when it is
// free in the network and no other interface of the container holds it
// there; else the interface's delegate id (delegateIDOf). An id is free
// in a network unless another container's record holds it there: a
// runtime may name a container "c1.net1", and its attachments must not
// be taken for c1's. For an ADD (adding), an interface name the
// container holds in another network is an ErrAlreadyAttached error.
// When the id the interface needs is not free, the error wraps
// ErrDelegateIDTaken: the interface has no attachment this daemon could
// have made (its ADD is refused; its DEL has nothing to remove).
func delegateID(c Configurator, id, network, ifName string, adding bool) (string, error) {
	alt := delegateIDOf(id, ifName)
	recs, _ := c.Attachments(id, alt) // an unreadable record only hides an attachment: the cache is asked next
	mine := func(r cninet.AttachmentRecord) bool {
		if r.RuntimeID != "" {
			return r.RuntimeID == id
		}
		return r.ID == id
	}
	for _, r := range recs {
		// An unreadable record under either id, where this interface's
		// belongs, is taken for its own: every command then fails naming
		// the file (cninet.ErrRecordUnreadable), and nothing runs.
		unreadable := r.Unreadable != "" && (r.ID == id || r.ID == alt)
		if r.IfName == ifName && (mine(r) || unreadable) && r.Network == network {
			return r.ID, nil
		}
	}
	for _, r := range recs {
		if adding && r.IfName == ifName && mine(r) {
			return "", fmt.Errorf("%w: container %s has interface %s in network %q (asked: network %q as %s)",
				cninet.ErrAlreadyAttached, id, ifName, r.Network, network, ifName)
		}
	}
	free := func(of string) bool {
		return !slices.ContainsFunc(recs, func(r cninet.AttachmentRecord) bool { return r.ID == of && r.Network == network && !mine(r) })
	}
	cached, altCached := cachedInterfaces(c, id, network), cachedInterfaces(c, alt, network)
	switch {
	case free(id) && slices.Contains(cached, ifName):
		return id, nil
	case free(alt) && slices.Contains(altCached, ifName): // only this interface is ever under alt
		return alt, nil
	}
	othersHere := slices.ContainsFunc(recs, func(r cninet.AttachmentRecord) bool {
		return r.ID == id && r.Network == network && r.IfName != ifName && mine(r)
	}) || slices.ContainsFunc(cached, func(name string) bool { return name != ifName })
	if free(id) && !othersHere {
		return id, nil
	}
	if !free(alt) || len(altCached) > 0 {
		return "", fmt.Errorf("%w: container %s in network %q as %s would be known to the plugins as %s, and another container attached to %q holds that id",
			ErrDelegateIDTaken, id, network, ifName, alt, network)
	}
	return alt, nil
}

// ErrDelegateIDTaken: the id a container's interface needs in a network
// (its own, or its delegate id) is another container's there; the error
// wraps cninet.ErrAlreadyAttached (code 100).
var ErrDelegateIDTaken = fmt.Errorf("%w: the id is another container's", cninet.ErrAlreadyAttached)

// cachedInterfaces lists the interfaces libcni's cache holds of id in
// network; none when the cache cannot be read.
func cachedInterfaces(c Configurator, id, network string) []string {
	names, _ := c.CachedInterfaces(id, network)
	return names
}

// liveDelegateIDs maps the runtime's valid attachments of a GC to what
// the delegate's plugins know: an entry with an interface name keeps
// that interface under either id it may have; an entry without one
// keeps every interface of its container, those recorded under delegate
// ids included. The ADDs of those containers must wait meanwhile
// (containerLocks), or one finished between this read and the GC would
// be collected.
func liveDelegateIDs(c Configurator, valid []types.GCAttachment) (ids []string, attachments []cninet.GCAttachment) {
	whole := map[string]bool{}
	for _, a := range valid {
		if a.IfName == "" {
			whole[a.ContainerID] = true
			ids = append(ids, a.ContainerID)
			continue
		}
		attachments = append(attachments,
			cninet.GCAttachment{ID: a.ContainerID, IfName: a.IfName},
			cninet.GCAttachment{ID: delegateIDOf(a.ContainerID, a.IfName), IfName: a.IfName})
	}
	if len(whole) == 0 {
		return ids, attachments
	}
	recs, _ := c.Attachments() // a record that cannot be read is kept by the GC itself
	for _, r := range recs {
		if r.RuntimeID != "" && whole[r.RuntimeID] {
			attachments = append(attachments, cninet.GCAttachment{ID: r.ID, IfName: r.IfName})
		}
	}
	return ids, attachments
}

// containerLocks serialises the ADDs and DELs of each container in this
// process (not CHECK), and a GC with the ADDs and DELs of the containers
// it keeps whole.
var containerLocks admission.Keyed
