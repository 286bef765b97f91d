package thick

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/seed1280861d/cninet"
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
// for an ADD, will know) the attachment of container id to network under
// ifName. Whichever id the host registry or libcni's cache knows that
// interface under is kept. Otherwise the container id is used, unless
// the registry records another interface of the container in network
// under it; then the interface gets delegateIDOf. An interface name
// that another network of the container uses keeps the id under which
// that network has it, so that Connect refuses the second use of the
// name (ErrAlreadyAttached) instead of the plugins failing on it.
func delegateID(c *cninet.Configurator, id, network, ifName string) string {
	alt := delegateIDOf(id, ifName)
	recs, _ := c.Attachments(id, alt) // an unreadable record only hides an attachment: the cache is asked next
	has := func(of string, match func(cninet.AttachmentRecord) bool) bool {
		return slices.ContainsFunc(recs, func(r cninet.AttachmentRecord) bool { return r.ID == of && match(r) })
	}
	sameIf := func(r cninet.AttachmentRecord) bool { return r.IfName == ifName }
	otherIfHere := func(r cninet.AttachmentRecord) bool { return r.Network == network && r.IfName != ifName }
	switch {
	case has(id, sameIf):
		return id
	case has(alt, sameIf):
		return alt
	case cachedAs(c, id, network, ifName):
		return id
	case cachedAs(c, alt, network, ifName):
		return alt
	case has(id, otherIfHere):
		return alt
	}
	return id
}

// cachedAs reports whether libcni's cache holds a result of id in
// network as ifName.
func cachedAs(c *cninet.Configurator, id, network, ifName string) bool {
	res, err := c.CachedResult(id, network, ifName)
	return err == nil && res != nil
}

// liveDelegateIDs maps the runtime's valid attachments of a GC to what
// the delegate's plugins know: an entry with an interface name keeps
// that interface under either id it may have; an entry without one
// keeps every interface of its container, those under delegate ids
// included (every record whose id is delegateIDOf its container and
// interface).
func liveDelegateIDs(c *cninet.Configurator, valid []types.GCAttachment) (ids []string, attachments []cninet.GCAttachment, err error) {
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
		return ids, attachments, nil
	}
	recs, err := c.Attachments()
	if err != nil && len(recs) == 0 {
		return nil, nil, err
	}
	for _, r := range recs {
		suffix := delegateIDOf("", r.IfName)
		if id, ok := strings.CutSuffix(r.ID, suffix); ok && whole[id] {
			attachments = append(attachments, cninet.GCAttachment{ID: r.ID, IfName: r.IfName})
		}
	}
	return ids, attachments, nil
}

// addsOfContainer serialises the ADDs of each container in this process.
var addsOfContainer = keyedLock{held: map[string]chan struct{}{}}

// keyedLock is a mutex per key whose waits are bounded by a context.
type keyedLock struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed when its holder unlocks
}

// lock waits until no one holds key or ctx is done.
func (l *keyedLock) lock(ctx context.Context, key string) (unlock func(), err error) {
	for {
		l.mu.Lock()
		done, busy := l.held[key]
		if !busy {
			mine := make(chan struct{})
			l.held[key] = mine
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.held, key)
				l.mu.Unlock()
				close(mine)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
