package attachments

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"

	cni "github.com/containerd/go-cni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/admission"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/workload"
)

// The host registry (internal/registry) holds one record per attachment,
// shared by every process on the host: whose it is (its owner), and,
// before any DEL, every proof its cleanup needs. Setup and Connect record
// an attachment before its ADD and complete the record after it; a
// detach records, before the DEL, every address the attachment's files
// prove, and removes the record when the cleanup found nothing left; a
// GC collects its own owner's dead records, and another owner's only
// when written in an earlier boot.
// Every operation holds the container id's lock in the registry, which
// every process honours; an ADD also holds the GC lock shared.

// Registry is the host registry as the operations use it: its
// records, and the locks of an id and of GC, which every process honours,
// taken together with this process's own (admission).
type Registry struct {
	Store     *registry.Registry
	CacheDir  string            // libcni's cache, which records name
	Admission admission.Control // per-allocation locks and the GC guard, in this process
	Logger    hclog.Logger
	Nets      *catalog.Networks // the known conflist of a recorded network
	Plugins   *catalog.Plugins  // the backends a record names
}

// lockWait bounds how long an operation waits for a lock another process
// holds when its ctx has no deadline of its own.
const lockWait = 2 * time.Minute

// Enter serialises operations on id in this process (admission) and
// across the host (the registry's id lock); adding also takes the GC lock
// shared, so that no GC runs while the ADD does. The waits are bounded
// by ctx.
func (r *Registry) Enter(ctx context.Context, id string, adding bool) (leave func(), err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	unlockGC := func() {}
	if adding {
		if unlockGC, err = r.Store.LockGC(ctx, false); err != nil {
			return nil, fmt.Errorf("%w: allocation %s: a GC holds the host's GC lock: %w", errs.Busy, id, err)
		}
	}
	leaveAdm, err := r.Admission.EnterWithin(ctx, id)
	if err != nil {
		unlockGC()
		return nil, fmt.Errorf("%w: allocation %s: another operation of this process holds it: %w", errs.Busy, id, err)
	}
	unlockID, err := r.Store.LockID(ctx, id)
	if err != nil {
		leaveAdm()
		unlockGC()
		return nil, fmt.Errorf("%w: allocation %s: another process holds its lock: %w", errs.Busy, id, err)
	}
	r.Logger.Trace("allocation locked", "alloc_id", id, "lock", time.Since(start))
	return func() {
		unlockID()
		leaveAdm()
		unlockGC()
	}, nil
}

// TryEnter is Enter for a caller that would rather not wait (the repair
// watcher): busy when this process or another holds id.
func (r *Registry) TryEnter(id string) (leave func(), busy bool) {
	leaveAdm, ok := r.Admission.TryEnter(id)
	if !ok {
		return nil, true
	}
	unlockID, err := r.Store.TryLockID(id)
	if err != nil {
		leaveAdm()
		return nil, true
	}
	return func() {
		unlockID()
		leaveAdm()
	}, false
}

// LockGC takes the host's GC lock alone: no ADD of any process runs
// while the GC step that takes it does (the plugins' GC command, the
// sweep). The wait is bounded by ctx.
func (r *Registry) LockGC(ctx context.Context) (unlock func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	unlock, err = r.Store.LockGC(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("%w: GC: another process's Setup or GC holds the host's GC lock: %w", errs.Busy, err)
	}
	return unlock, nil
}

// TryLockIDs takes, in this process and across the host, the locks of
// the ids of atts that nobody holds, and returns those it could not take:
// another operation is working on them. GC never waits for an id's lock
// while it holds others.
func (r *Registry) TryLockIDs(atts []footprint.Attachment) (unlock func(), busy map[string]bool) {
	busy = map[string]bool{}
	var unlocks []func()
	done := map[string]bool{}
	for _, a := range atts {
		if done[a.ID] || busy[a.ID] {
			continue
		}
		u, err := r.Store.TryLockID(a.ID)
		if err != nil {
			busy[a.ID] = true
			continue
		}
		done[a.ID] = true
		unlocks = append(unlocks, u)
	}
	return func() {
		for _, u := range unlocks {
			u()
		}
	}, busy
}

// recordOf returns a new record of att for req: the exact conflist, the
// plugins with the backends they use here, the args and capabilities.
func (r *Registry) recordOf(owner string, req Request, att Attachment, netns string) *registry.Record {
	rec := &registry.Record{
		Owner:      owner,
		Key:        identity.Key{Network: att.Name(), ID: req.ID, IfName: att.IfName},
		RuntimeID:  req.RuntimeID,
		ViaCNI:     att.ViaCNI,
		CacheDir:   r.CacheDir,
		NetNS:      netns,
		NetNSInode: workload.Inode(netns),
		State:      registry.Adding,
		Args:       req.Args,
		ConfList:   att.Conf.Bytes,
		Plugins:    r.Plugins.Recorded(att.Conf),
	}
	caps := map[string]json.RawMessage{}
	if len(req.Mappings) > 0 {
		if raw, err := json.Marshal(req.Mappings); err == nil {
			caps[catalog.CapabilityPortMappings] = raw
		}
	}
	for name, value := range req.Caps {
		if raw, err := json.Marshal(value); err == nil {
			caps[name] = raw
		}
	}
	if len(caps) > 0 {
		rec.Capabilities = caps
	}
	return rec
}

// RecordAdding records att before its first ADD: a process killed at any
// point of the ADD leaves a record that the next Teardown or GC, in any
// process, finishes.
func (r *Registry) RecordAdding(owner string, req Request, att Attachment, netns string) (*registry.Record, error) {
	rec := r.recordOf(owner, req, att, netns)
	if old := r.Recorded(req.ID, att.Name(), att.IfName); old != nil {
		rec.Since, rec.Addresses = old.Since, old.Addresses // a retried Setup: keep what the earlier one proved
	}
	if err := r.Store.Put(rec); err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: %w", errs.IO, req.ID, att.Name(), err)
	}
	return rec, nil
}

// RecordAttached completes rec with what the ADD returned: its addresses
// and the result itself (raw; from an injected Config.CNI, which gives
// none, the result as go-cni read it).
func (r *Registry) RecordAttached(rec *registry.Record, res *cni.Result, raw *types100.Result) error {
	rec.State = registry.Attached
	if raw == nil {
		raw = rawResult(res, rec)
	}
	if b, err := json.Marshal(raw); err == nil && raw != nil {
		rec.Result = b
	}
	if cur := r.Recorded(rec.ID, rec.Network, rec.IfName); cur != nil {
		rec.AddAddresses(cur.Addresses...) // what a cleanup between attempts recorded as proof
	}
	rec.AddAddresses(resultAddrs(res)...)
	if err := r.Store.Put(rec); err != nil {
		return fmt.Errorf("%w: allocation %s in network %q: %w", errs.IO, rec.ID, rec.Network, err)
	}
	return nil
}

// Recorded returns the record of id in network as ifName, or nil.
func (r *Registry) Recorded(id, network, ifName string) *registry.Record {
	recs, _, err := r.Store.Of(id)
	if err != nil {
		return nil
	}
	for i := range recs {
		if recs[i].Network == network && recs[i].IfName == ifName {
			return &recs[i]
		}
	}
	return nil
}

// recordedIn reports whether the registry records an attachment of id in
// network.
func (r *Registry) recordedIn(id, network string) bool {
	recs, _, err := r.Store.Of(id)
	if err != nil {
		return false
	}
	for _, rec := range recs {
		if rec.Network == network {
			return true
		}
	}
	return false
}

// forget removes att's record once its detach left nothing.
func (r *Registry) forget(id string, att Attachment) error {
	start := time.Now()
	defer func() {
		r.Logger.Debug("attachment forgotten", "alloc_id", id, "network", att.Name(), "record", time.Since(start))
	}()
	if err := r.Store.Remove(identity.Key{Network: att.Name(), ID: id, IfName: att.IfName}); err != nil {
		return fmt.Errorf("%w: allocation %s in network %q: %w", errs.IO, id, att.Name(), err)
	}
	return nil
}

// recordProofs is the proof store (footprint.ProofStore) of one detach:
// the attachment's record, created when the registry never saw it (an
// attachment from before the registry, found in libcni's cache).
type recordProofs struct {
	reg   *Registry
	owner string
	spent time.Duration // in the registry: the registry's share of a detach
	fa    Found
	rec   *registry.Record
	read  bool
}

func (p *recordProofs) load() {
	if !p.read {
		start := time.Now()
		p.rec, p.read = p.reg.Recorded(p.fa.Req.ID, p.fa.Att.Name(), p.fa.Att.IfName), true
		p.spent += time.Since(start)
	}
}

// Recorded returns the addresses the attachment's record proves.
func (p *recordProofs) Recorded(att footprint.Attachment) []netip.Addr {
	if att != (footprint.Attachment{Network: p.fa.Att.Name(), ID: p.fa.Req.ID}) {
		return nil
	}
	p.load()
	if p.rec == nil {
		return nil
	}
	return p.rec.Addresses
}

// Record adds addrs to the attachment's record, durably.
func (p *recordProofs) Record(att footprint.Attachment, addrs []netip.Addr) error {
	if att != (footprint.Attachment{Network: p.fa.Att.Name(), ID: p.fa.Req.ID}) {
		return fmt.Errorf("no record of %s in this detach", att)
	}
	p.load()
	if p.rec == nil {
		p.rec = p.reg.recordOf(p.owner, p.fa.Req, p.fa.Att, "")
	}
	if !p.rec.AddAddresses(addrs...) && p.rec.State == registry.Detaching {
		return nil
	}
	p.rec.State = registry.Detaching
	start := time.Now()
	defer func() { p.spent += time.Since(start) }()
	return p.reg.Store.Put(p.rec)
}

// Holding implements footprint.RecordedHolders: the attachments recorded
// as attached or being added that name one of addrs, whoever owns them.
// Every Teardown asks it for its own addresses, so only the records whose
// bytes may name one are decoded (registry.Naming).
// A registry that cannot be read holds nothing it can name; the files
// and rules are still asked.
func (r *Registry) Holding(addrs []netip.Addr) map[netip.Addr][]footprint.Attachment {
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		want[a] = true
	}
	all, _ := r.Store.Naming(addrs) // only the records that may name one are decoded
	out := map[netip.Addr][]footprint.Attachment{}
	for _, s := range all.Summaries {
		if s.State != registry.Attached && s.State != registry.Adding {
			continue
		}
		for _, a := range s.Addresses {
			if want[a] {
				out[a] = append(out[a], footprint.Attachment{Network: s.Network, ID: s.ID})
			}
		}
	}
	return out
}

// detaching marks the attachment's record as detaching before its DEL,
// where Record did not (the files proved nothing new): from then on no
// repair writes anything of it (a repair restores only what a record
// says is attached), whatever becomes of the DEL. Without a record there
// is nothing to mark.
func (p *recordProofs) detaching() error {
	p.load()
	if p.rec == nil || p.rec.State == registry.Detaching {
		return nil
	}
	p.rec.State = registry.Detaching
	start := time.Now()
	defer func() { p.spent += time.Since(start) }()
	return p.reg.Store.Put(p.rec)
}

// RecordedConf is the conflist rec's ADD ran with, else the known
// network's: a DEL after the conflist changed or went runs as the ADD did.
func (r *Registry) RecordedConf(rec registry.Record) (catalog.Conf, error) {
	known, err := r.Nets.Known(rec.Network, true)
	if err == nil && (len(rec.ConfList) == 0 || bytes.Equal(known.Bytes, rec.ConfList)) {
		return known, nil // unchanged: the conf already parsed
	}
	if len(rec.ConfList) > 0 {
		conf, err := catalog.Parse(rec.ConfList)
		if err == nil && conf.Info.Name == rec.Network {
			return conf, nil
		}
	}
	return known, err
}

// ownerKey carries WithOwner's owner through an operation's context.
type ownerKey struct{}

// WithOwner is cninet.WithOwner: ctx for operations on behalf of owner
// instead of Config.Owner (OwnerOf); an empty owner changes nothing.
func WithOwner(ctx context.Context, owner string) context.Context {
	if owner == "" {
		return ctx
	}
	return context.WithValue(ctx, ownerKey{}, owner)
}

// Owners says whose attachments an operation makes and collects:
// Config.Owner, unless the caller names another (WithOwner).
type Owners struct {
	Configured string // Config.Owner
}

// OwnerOf is the owner an operation under ctx acts for.
func (o Owners) OwnerOf(ctx context.Context) string {
	if owner, ok := ctx.Value(ownerKey{}).(string); ok {
		return owner
	}
	return o.Configured
}

// RecordedNetNS returns the namespace a DEL of id's found attachments may
// enter, for a caller that was given none (GC): the one their records
// name, while it is still theirs — the same namespace, whose interface
// still holds a recorded address (workload.StillHolds) — else "". Entering
// it lets the plugins remove the workload's interfaces (and with them
// the host's ends of its veths); a namespace path that another workload
// reuses is never entered.
func (r *Registry) RecordedNetNS(id string, found []Found) string {
	recs, _, err := r.Store.Of(id)
	if err != nil {
		return ""
	}
	netns := ""
	for _, fa := range found {
		at := slices.IndexFunc(recs, func(rec registry.Record) bool {
			return rec.Network == fa.Att.Name() && rec.IfName == fa.Att.IfName
		})
		if at < 0 {
			return ""
		}
		rec := recs[at]
		if (netns != "" && rec.NetNS != netns) || rec.FromEarlierBoot() || !workload.StillHolds(rec.NetNS, rec.NetNSInode, rec.IfName, rec.Addresses) {
			return ""
		}
		netns = rec.NetNS
	}
	return netns
}
