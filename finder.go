package cninet

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
)

// attachmentFinder finds an allocation's attachments: the networks its
// Allocation names, the host registry's records, and, for state the
// registry never saw, libcni's cache and the intent records.
type attachmentFinder struct {
	nets     *catalog.Networks
	registry *hostRegistry
	lib      *libcni.CNIConfig // reads libcni's cache
	cacheDir string
	ifs      ifNaming
	logger   hclog.Logger
	// injectedCNI: the default network's first interface is attached
	// through an injected Config.CNI, whose cache cninet may not see.
	injectedCNI bool
}

// named resolves the networks alloc joins, in order: its
// NetworkNames, or the default network. An unknown name fails before any
// plugin runs. Teardown (forTeardown) may still name a network that a
// Reload dropped, and works after Close.
func (f *attachmentFinder) named(alloc *Allocation, forTeardown bool) ([]attachment, error) {
	known := f.nets.View()
	def := known.Default
	if known.Closed && !forTeardown {
		return nil, fmt.Errorf("%w: network %q", ErrClosed, def.Info.Name)
	}
	names := alloc.NetworkNames
	if len(names) == 0 {
		names = []string{def.Info.Name}
	}
	atts := make([]attachment, 0, len(names))
	var unknown []string
	for i, name := range names {
		if i == 0 && name == def.Info.Name {
			conf, err := f.nets.Current()
			if err != nil && !(forTeardown && errors.Is(err, ErrClosed)) {
				return nil, err
			}
			atts = append(atts, attachment{conf: conf, ifName: f.ifs.at(0), viaCNI: true})
			continue
		}
		conf, ok := known.Lookup(name, forTeardown)
		if !ok && forTeardown && f.registry.recordedIn(alloc.ID, name) {
			continue // its conflist went: the record has it (withRecords)
		}
		if !ok {
			unknown = append(unknown, strconv.Quote(name))
		}
		atts = append(atts, attachment{conf: conf, ifName: f.ifs.at(i)})
	}
	if len(unknown) > 0 {
		return nil, known.NotFound(alloc.ID, unknown)
	}
	return atts, nil
}

// of returns every attachment of alloc that an operation for owner acts
// on: those libcni's cache and the Allocation know (cached), each told
// what its record says, and every other attachment the registry records
// for owner (withRecords); another owner's records take theirs away,
// and so do records of networks this Configurator does not know that the
// allocation does not name: another Configurator of the same owner made
// them. unreadable are the id's registry files this cninet cannot read:
// their attachments are left out.
func (f *attachmentFinder) of(alloc *Allocation, req request, owner string, forTeardown bool) (_ []foundAttachment, unreadable []registry.Damaged, _ error) {
	found, err := f.cached(alloc, req, forTeardown)
	if err != nil {
		return nil, nil, err
	}
	if found, unreadable, err = f.withRecords(ownedBy(owner), req, found); err != nil {
		return nil, nil, err
	}
	// A record of a network this Configurator does not know is another
	// Configurator's of the same owner, unless the allocation names the
	// network (its conflist went: the record has it).
	return slices.DeleteFunc(found, func(fa foundAttachment) bool {
		_, err := f.nets.Known(fa.att.name(), true)
		return err != nil && !slices.Contains(alloc.NetworkNames, fa.att.name())
	}), unreadable, nil
}

// ownedBy says an operation acts on owner's records alone.
func ownedBy(owner string) func(registry.Record) bool {
	return func(rec registry.Record) bool { return rec.Owner == owner }
}

// cached returns every network alloc is attached to: the networks it
// names, in its order, then the other known networks that libcni's cache
// holds an attachment of its ID in, by interface name. A named network
// the cache knows takes the interface the cache says (Connect may have
// put it elsewhere); one the cache does not know keeps its place — its
// ADD may have been cut short before anything was cached — unless the
// cache proves that interface is another network's. A network only the
// cache knows is told the args and port mappings it was attached with.
func (f *attachmentFinder) cached(alloc *Allocation, req request, forTeardown bool) ([]foundAttachment, error) {
	atts, err := f.named(alloc, forTeardown)
	if err != nil {
		return nil, err
	}
	cached, err := f.lib.GetCachedAttachments(req.id)
	if err != nil {
		f.logger.Warn("reading libcni's cache failed: only the allocation's own networks are covered",
			"alloc_id", req.id, "cache_dir", f.cacheDir, "error", err)
	}
	cachedIfs := map[string][]*libcni.NetworkAttachment{} // by network
	ifOwner := map[string]string{}                        // interface → network, per the cache
	for _, a := range cached {
		cachedIfs[a.Network] = append(cachedIfs[a.Network], a)
		ifOwner[a.IfName] = a.Network
	}
	var found []foundAttachment
	for _, att := range atts {
		as := cachedIfs[att.name()]
		delete(cachedIfs, att.name())
		if len(as) == 0 {
			if owner, taken := ifOwner[att.ifName]; !taken || owner == att.name() {
				found = append(found, foundAttachment{att: att, req: req})
			}
			continue
		}
		for i, a := range as {
			fa := foundAttachment{att: att, req: req, cached: true, settled: true}
			if a.IfName != att.ifName {
				fa.att.ifName, fa.att.viaCNI = a.IfName, false
			}
			if i > 0 {
				fa.req = cachedRequest(req, a)
			}
			found = append(found, fa)
		}
	}
	found = append(found, f.cachedOnly(req, cachedIfs, forTeardown)...)
	if forTeardown {
		found = append(found, f.recordedOnly(req, found)...)
	}
	return found, nil
}

// attached drops from an allocation's found attachments the networks the
// allocation names that are not attached any more: when libcni's cache
// knows the workload, a network it does not know was disconnected, or its
// Connect failed and was rolled back. (Teardown keeps them: a DEL of what
// is gone is harmless there, and an ADD cut short is never cached.) A
// network attached through an injected Config.CNI, whose cache cninet may
// not see, is taken at its word.
func (f *attachmentFinder) attached(all []foundAttachment) []foundAttachment {
	if !slices.ContainsFunc(all, func(fa foundAttachment) bool { return fa.cached }) {
		return all
	}
	return slices.DeleteFunc(all, func(fa foundAttachment) bool { return !fa.cached && !(fa.att.viaCNI && f.injectedCNI) })
}

// recordedOnly turns the intent records of req's id on known networks
// that no found attachment covers into found attachments: a DEL of them began (libcni's cache
// is gone with it) and its force cleanup never finished, so a Teardown
// or Disconnect finishes it.
func (f *attachmentFinder) recordedOnly(req request, found []foundAttachment) []foundAttachment {
	var out []foundAttachment
	for _, r := range footprint.IntentRecordsOf(f.cacheDir, req.id, f.nets.Names()) {
		if slices.ContainsFunc(found, func(fa foundAttachment) bool { return fa.att.name() == r.Network }) {
			continue
		}
		conf, err := f.nets.Known(r.Network, true)
		if err != nil {
			continue
		}
		out = append(out, foundAttachment{att: attachment{conf: conf, ifName: cmp.Or(r.IfName, f.ifs.at(0))}, req: req, cached: true})
	}
	return out
}

// cachedOnly turns the cached attachments of networks the allocation does
// not name into found attachments, sorted by interface name; a network this
// Configurator does not know is not its to detach.
func (f *attachmentFinder) cachedOnly(req request, byNetwork map[string][]*libcni.NetworkAttachment, forTeardown bool) []foundAttachment {
	var found []foundAttachment
	for name, as := range byNetwork {
		conf, err := f.nets.Known(name, forTeardown)
		if err != nil {
			f.logger.Debug("cached attachment of a network this configurator does not know left alone",
				"alloc_id", req.id, "network", name)
			continue
		}
		for _, a := range as {
			found = append(found, foundAttachment{att: attachment{conf: conf, ifName: a.IfName}, req: cachedRequest(req, a), cached: true, settled: true})
		}
	}
	slices.SortFunc(found, func(a, b foundAttachment) int {
		if d := f.ifs.index(a.att.ifName) - f.ifs.index(b.att.ifName); d != 0 {
			return d
		}
		return strings.Compare(a.att.name(), b.att.name())
	})
	return found
}

// withRecords adds to found, an allocation's attachments as the
// Allocation and libcni's cache say, those of its records that acts
// says the operation acts on (its own owner's, ownedBy): the registry is
// the one source that outlives a DEL, so a record names an attachment
// whose detach a killed process began. A found attachment with such a
// record is told what the record says (its conflist, args and
// capabilities). Other records are other owners' attachments: left out,
// and so are found attachments they name. So are those whose registry
// file this cninet cannot read (unreadable, every such file of the id):
// whose they are is unknown.
func (f *attachmentFinder) withRecords(acts func(registry.Record) bool, req request, found []foundAttachment) (_ []foundAttachment, unreadable []registry.Damaged, _ error) {
	recs, damaged, err := f.registry.store.Of(req.id)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading the host registry: %w", ErrIO, err)
	}
	for _, d := range damaged {
		f.logger.Warn("registry file is no usable record: kept, and its attachment left alone", "alloc_id", req.id, "path", d.Path, "error", d.Err)
	}
	found = withoutUnreadable(found, damaged)
	for _, rec := range recs {
		at := slices.IndexFunc(found, func(fa foundAttachment) bool {
			return fa.att.name() == rec.Network && fa.att.ifName == rec.IfName
		})
		if !acts(rec) {
			if at >= 0 {
				f.logger.Debug("attachment of another owner left alone", "alloc_id", req.id, "network", rec.Network, "owner", rec.Owner)
				found = slices.Delete(found, at, at+1)
			}
			continue
		}
		conf, err := f.registry.recordedConf(rec)
		if err != nil {
			f.logger.Warn("recorded attachment of an unknown network left alone", "alloc_id", req.id, "network", rec.Network, "error", err)
			continue
		}
		if at >= 0 {
			found[at].att.conf, found[at].req = conf, recordedRequest(found[at].req, rec)
			found[at].cached, found[at].settled = true, rec.State == registry.Attached
			continue
		}
		found = append(found, foundAttachment{att: attachment{conf: conf, ifName: rec.IfName}, req: recordedRequest(req, rec),
			cached: true, settled: rec.State == registry.Attached})
	}
	return found, damaged, nil
}

// cachedAt returns libcni's cached attachment of id in network as ifName,
// or nil.
func (f *attachmentFinder) cachedAt(id, network, ifName string) *libcni.NetworkAttachment {
	cached, err := f.lib.GetCachedAttachments(id)
	if err != nil {
		f.logger.Warn("reading libcni's cache failed", "alloc_id", id, "cache_dir", f.cacheDir, "error", err)
		return nil
	}
	for _, a := range cached {
		if a.Network == network && a.IfName == ifName {
			return a
		}
	}
	return nil
}
