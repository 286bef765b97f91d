package attachments

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
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
)

// Finder finds an allocation's attachments: the networks its
// Allocation names, the host registry's records, and, for state the
// registry never saw, libcni's cache and the intent records.
type Finder struct {
	Nets     *catalog.Networks
	Registry *Registry
	Lib      *libcni.CNIConfig // reads libcni's cache
	CacheDir string
	Ifs      IfNaming
	Logger   hclog.Logger
	// InjectedCNI: the default network's first interface is attached
	// through an injected Config.CNI, whose cache cninet may not see.
	InjectedCNI bool
}

// Named resolves the networks req's allocation joins, in order: those
// it names (Request.Networks), or the default network. An unknown name fails before any
// plugin runs. Teardown (forTeardown) may still name a network that a
// Reload dropped, and works after Close.
func (f *Finder) Named(req Request, forTeardown bool) ([]Attachment, error) {
	known := f.Nets.View()
	def := known.Default
	if known.Closed && !forTeardown {
		return nil, fmt.Errorf("%w: network %q", errs.Closed, def.Info.Name)
	}
	names := req.Networks
	if len(names) == 0 {
		names = []string{def.Info.Name}
	}
	atts := make([]Attachment, 0, len(names))
	var unknown []string
	for i, name := range names {
		if i == 0 && name == def.Info.Name {
			conf, err := f.Nets.Current()
			if err != nil && !(forTeardown && errors.Is(err, errs.Closed)) {
				return nil, err
			}
			atts = append(atts, Attachment{Conf: conf, IfName: f.Ifs.at(0), ViaCNI: true})
			continue
		}
		conf, ok := known.Lookup(name, forTeardown)
		if !ok && forTeardown && f.Registry.recordedIn(req.ID, name) {
			continue // its conflist went: the record has it (WithRecords)
		}
		if !ok {
			unknown = append(unknown, strconv.Quote(name))
		}
		atts = append(atts, Attachment{Conf: conf, IfName: f.Ifs.at(i)})
	}
	if len(unknown) > 0 {
		return nil, known.NotFound(req.ID, unknown)
	}
	return atts, nil
}

// Of returns every attachment of req's allocation that an operation for owner acts
// on: those libcni's cache and the Allocation know (cached), each told
// what its record says, and every other attachment the registry records
// for owner (WithRecords); another owner's records take theirs away,
// and so do records of networks this Configurator does not know that the
// allocation does not name: another Configurator of the same owner made
// them. unreadable are the id's registry files this cninet cannot read:
// their attachments are left out.
func (f *Finder) Of(req Request, owner string, forTeardown bool) (_ []Found, unreadable []registry.Damaged, _ error) {
	found, err := f.cached(req, forTeardown)
	if err != nil {
		return nil, nil, err
	}
	if found, unreadable, err = f.WithRecords(ownedBy(owner), req, found); err != nil {
		return nil, nil, err
	}
	// A record of a network this Configurator does not know is another
	// Configurator's of the same owner, unless the allocation names the
	// network (its conflist went: the record has it).
	return slices.DeleteFunc(found, func(fa Found) bool {
		_, err := f.Nets.Known(fa.Att.Name(), true)
		return err != nil && !slices.Contains(req.Networks, fa.Att.Name())
	}), unreadable, nil
}

// ownedBy says an operation acts on owner's records alone.
func ownedBy(owner string) func(registry.Record) bool {
	return func(rec registry.Record) bool { return rec.Owner == owner }
}

// cached returns every network req's allocation is attached to: the networks it
// names, in its order, then the other known networks that libcni's cache
// holds an attachment of its ID in, by interface name. A named network
// the cache knows takes the interface the cache says (Connect may have
// put it elsewhere); one the cache does not know keeps its place — its
// ADD may have been cut short before anything was cached — unless the
// cache proves that interface is another network's. A network only the
// cache knows is told the args and port mappings it was attached with.
func (f *Finder) cached(req Request, forTeardown bool) ([]Found, error) {
	atts, err := f.Named(req, forTeardown)
	if err != nil {
		return nil, err
	}
	cached, err := f.Lib.GetCachedAttachments(req.ID)
	if err != nil {
		f.Logger.Warn("reading libcni's cache failed: only the allocation's own networks are covered",
			"alloc_id", req.ID, "cache_dir", f.CacheDir, "error", err)
	}
	cachedIfs := map[string][]*libcni.NetworkAttachment{} // by network
	ifOwner := map[string]string{}                        // interface → network, per the cache
	for _, a := range cached {
		cachedIfs[a.Network] = append(cachedIfs[a.Network], a)
		ifOwner[a.IfName] = a.Network
	}
	var found []Found
	for _, att := range atts {
		as := cachedIfs[att.Name()]
		delete(cachedIfs, att.Name())
		if len(as) == 0 {
			if owner, taken := ifOwner[att.IfName]; !taken || owner == att.Name() {
				found = append(found, Found{Att: att, Req: req})
			}
			continue
		}
		for i, a := range as {
			fa := Found{Att: att, Req: req, Cached: true, Settled: true}
			if a.IfName != att.IfName {
				fa.Att.IfName, fa.Att.ViaCNI = a.IfName, false
			}
			if i > 0 {
				fa.Req = CachedRequest(req, a)
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

// Attached drops from an allocation's found attachments the networks the
// allocation names that are not attached any more: when libcni's cache
// knows the workload, a network it does not know was disconnected, or its
// Connect failed and was rolled back. (Teardown keeps them: a DEL of what
// is gone is harmless there, and an ADD cut short is never cached.) A
// network attached through an injected Config.CNI, whose cache cninet may
// not see, is taken at its word.
func (f *Finder) Attached(all []Found) []Found {
	if !slices.ContainsFunc(all, func(fa Found) bool { return fa.Cached }) {
		return all
	}
	return slices.DeleteFunc(all, func(fa Found) bool { return !fa.Cached && !(fa.Att.ViaCNI && f.InjectedCNI) })
}

// recordedOnly turns the intent records of req's id on known networks
// that no found attachment covers into found attachments: a DEL of them began (libcni's cache
// is gone with it) and its force cleanup never finished, so a Teardown
// or Disconnect finishes it.
func (f *Finder) recordedOnly(req Request, found []Found) []Found {
	var out []Found
	for _, r := range footprint.IntentRecordsOf(f.CacheDir, req.ID, f.Nets.Names()) {
		if slices.ContainsFunc(found, func(fa Found) bool { return fa.Att.Name() == r.Network }) {
			continue
		}
		conf, err := f.Nets.Known(r.Network, true)
		if err != nil {
			continue
		}
		out = append(out, Found{Att: Attachment{Conf: conf, IfName: cmp.Or(r.IfName, f.Ifs.at(0))}, Req: req, Cached: true})
	}
	return out
}

// cachedOnly turns the cached attachments of networks the allocation does
// not name into found attachments, sorted by interface name; a network this
// Configurator does not know is not its to detach.
func (f *Finder) cachedOnly(req Request, byNetwork map[string][]*libcni.NetworkAttachment, forTeardown bool) []Found {
	var found []Found
	for name, as := range byNetwork {
		conf, err := f.Nets.Known(name, forTeardown)
		if err != nil {
			f.Logger.Debug("cached attachment of a network this configurator does not know left alone",
				"alloc_id", req.ID, "network", name)
			continue
		}
		for _, a := range as {
			found = append(found, Found{Att: Attachment{Conf: conf, IfName: a.IfName}, Req: CachedRequest(req, a), Cached: true, Settled: true})
		}
	}
	slices.SortFunc(found, func(a, b Found) int {
		if d := f.Ifs.index(a.Att.IfName) - f.Ifs.index(b.Att.IfName); d != 0 {
			return d
		}
		return strings.Compare(a.Att.Name(), b.Att.Name())
	})
	return found
}

// WithRecords adds to found, an allocation's attachments as the
// Allocation and libcni's cache say, those of its records that acts
// says the operation acts on (its own owner's, ownedBy): the registry is
// the one source that outlives a DEL, so a record names an attachment
// whose detach a killed process began. A found attachment with such a
// record is told what the record says (its conflist, args and
// capabilities). Other records are other owners' attachments: left out,
// and so are found attachments they name. So are those whose registry
// file this cninet cannot read (unreadable, every such file of the id):
// whose they are is unknown.
func (f *Finder) WithRecords(acts func(registry.Record) bool, req Request, found []Found) (_ []Found, unreadable []registry.Damaged, _ error) {
	recs, damaged, err := f.Registry.Store.Of(req.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading the host registry: %w", errs.IO, err)
	}
	for _, d := range damaged {
		f.Logger.Warn("registry file is no usable record: kept, and its attachment left alone", "alloc_id", req.ID, "path", d.Path, "error", d.Err)
	}
	found = withoutUnreadable(found, damaged)
	for _, rec := range recs {
		at := slices.IndexFunc(found, func(fa Found) bool {
			return fa.Att.Name() == rec.Network && fa.Att.IfName == rec.IfName
		})
		if !acts(rec) {
			if at >= 0 {
				f.Logger.Debug("attachment of another owner left alone", "alloc_id", req.ID, "network", rec.Network, "owner", rec.Owner)
				found = slices.Delete(found, at, at+1)
			}
			continue
		}
		conf, err := f.Registry.RecordedConf(rec)
		if err != nil {
			f.Logger.Warn("recorded attachment of an unknown network left alone", "alloc_id", req.ID, "network", rec.Network, "error", err)
			continue
		}
		if at >= 0 {
			found[at].Att.Conf, found[at].Req = conf, RecordedRequest(found[at].Req, rec)
			found[at].Cached, found[at].Settled = true, rec.State == registry.Attached
			continue
		}
		found = append(found, Found{Att: Attachment{Conf: conf, IfName: rec.IfName}, Req: RecordedRequest(req, rec),
			Cached: true, Settled: rec.State == registry.Attached})
	}
	return found, damaged, nil
}

// CachedAt returns libcni's cached attachment of id in network as ifName,
// or nil.
func (f *Finder) CachedAt(id, network, ifName string) *libcni.NetworkAttachment {
	cached, err := f.Lib.GetCachedAttachments(id)
	if err != nil {
		f.Logger.Warn("reading libcni's cache failed", "alloc_id", id, "cache_dir", f.CacheDir, "error", err)
		return nil
	}
	for _, a := range cached {
		if a.Network == network && a.IfName == ifName {
			return a
		}
	}
	return nil
}
