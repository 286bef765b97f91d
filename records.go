package cninet

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cni "github.com/containerd/go-cni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/admission"
	"github.com/seed1280861d/cninet/internal/catalog"
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

// hostRegistry is the host registry as the operations use it: its
// records, and the locks of an id and of GC, which every process honours,
// taken together with this process's own (admission).
type hostRegistry struct {
	store    *registry.Registry
	cacheDir string            // libcni's cache, which records name
	adm      admission.Control // per-allocation locks and the GC guard, in this process
	logger   hclog.Logger
	nets     *catalog.Networks // the known conflist of a recorded network
	plugins  *catalog.Plugins  // the backends a record names
}

// defaultStateDir is the registry every process on a host shares.
const defaultStateDir = registry.DefaultDir

// defaultOwner names a Configurator's attachments when Config.Owner is
// empty: the executable's base name.
func defaultOwner() string {
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) == "" {
		return "cninet"
	}
	return filepath.Base(exe)
}

// lockWait bounds how long an operation waits for a lock another process
// holds when its ctx has no deadline of its own.
const lockWait = 2 * time.Minute

// enter serialises operations on id in this process (admission) and
// across the host (the registry's id lock); adding also takes the GC lock
// shared, so that no GC runs while the ADD does. The waits are bounded
// by ctx.
func (r *hostRegistry) enter(ctx context.Context, id string, adding bool) (leave func(), err error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	unlockGC := func() {}
	if adding {
		if unlockGC, err = r.store.LockGC(ctx, false); err != nil {
			return nil, fmt.Errorf("%w: allocation %s: a GC holds the host's GC lock: %w", ErrBusy, id, err)
		}
	}
	leaveAdm, err := r.adm.EnterWithin(ctx, id)
	if err != nil {
		unlockGC()
		return nil, fmt.Errorf("%w: allocation %s: another operation of this process holds it: %w", ErrBusy, id, err)
	}
	unlockID, err := r.store.LockID(ctx, id)
	if err != nil {
		leaveAdm()
		unlockGC()
		return nil, fmt.Errorf("%w: allocation %s: another process holds its lock: %w", ErrBusy, id, err)
	}
	r.logger.Trace("allocation locked", "alloc_id", id, "lock", time.Since(start))
	return func() {
		unlockID()
		leaveAdm()
		unlockGC()
	}, nil
}

// tryEnter is enter for a caller that would rather not wait (the repair
// watcher): busy when this process or another holds id.
func (r *hostRegistry) tryEnter(id string) (leave func(), busy bool) {
	leaveAdm, ok := r.adm.TryEnter(id)
	if !ok {
		return nil, true
	}
	unlockID, err := r.store.TryLockID(id)
	if err != nil {
		leaveAdm()
		return nil, true
	}
	return func() {
		unlockID()
		leaveAdm()
	}, false
}

// lockGC takes the host's GC lock alone: no ADD of any process runs
// while the GC step that takes it does (the plugins' GC command, the
// sweep). The wait is bounded by ctx.
func (r *hostRegistry) lockGC(ctx context.Context) (unlock func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	unlock, err = r.store.LockGC(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("%w: GC: another process's Setup or GC holds the host's GC lock: %w", ErrBusy, err)
	}
	return unlock, nil
}

// tryLockIDs takes, in this process and across the host, the locks of
// the ids of atts that nobody holds, and returns those it could not take:
// another operation is working on them. GC never waits for an id's lock
// while it holds others.
func (r *hostRegistry) tryLockIDs(atts []footprint.Attachment) (unlock func(), busy map[string]bool) {
	busy = map[string]bool{}
	var unlocks []func()
	done := map[string]bool{}
	for _, a := range atts {
		if done[a.ID] || busy[a.ID] {
			continue
		}
		u, err := r.store.TryLockID(a.ID)
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
func (r *hostRegistry) recordOf(owner string, req request, att attachment, netns string) *registry.Record {
	rec := &registry.Record{
		Owner:      owner,
		Key:        identity.Key{Network: att.name(), ID: req.id, IfName: att.ifName},
		RuntimeID:  req.runtimeID,
		ViaCNI:     att.viaCNI,
		CacheDir:   r.cacheDir,
		NetNS:      netns,
		NetNSInode: workload.Inode(netns),
		State:      registry.Adding,
		Args:       req.args,
		ConfList:   att.conf.Bytes,
		Plugins:    r.plugins.Recorded(att.conf),
	}
	caps := map[string]json.RawMessage{}
	if len(req.mappings) > 0 {
		if raw, err := json.Marshal(req.mappings); err == nil {
			caps[catalog.CapabilityPortMappings] = raw
		}
	}
	for name, value := range req.caps {
		if raw, err := json.Marshal(value); err == nil {
			caps[name] = raw
		}
	}
	if len(caps) > 0 {
		rec.Capabilities = caps
	}
	return rec
}

// recordAdding records att before its first ADD: a process killed at any
// point of the ADD leaves a record that the next Teardown or GC, in any
// process, finishes.
func (r *hostRegistry) recordAdding(owner string, req request, att attachment, netns string) (*registry.Record, error) {
	rec := r.recordOf(owner, req, att, netns)
	if old := r.recorded(req.id, att.name(), att.ifName); old != nil {
		rec.Since, rec.Addresses = old.Since, old.Addresses // a retried Setup: keep what the earlier one proved
	}
	if err := r.store.Put(rec); err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: %w", ErrIO, req.id, att.name(), err)
	}
	return rec, nil
}

// recordAttached completes rec with what the ADD returned: its addresses
// and the result itself (raw; from an injected Config.CNI, which gives
// none, the result as go-cni read it).
func (r *hostRegistry) recordAttached(rec *registry.Record, res *cni.Result, raw *types100.Result) error {
	rec.State = registry.Attached
	if raw == nil {
		raw = rawResult(res, rec)
	}
	if b, err := json.Marshal(raw); err == nil && raw != nil {
		rec.Result = b
	}
	if cur := r.recorded(rec.ID, rec.Network, rec.IfName); cur != nil {
		rec.AddAddresses(cur.Addresses...) // what a cleanup between attempts recorded as proof
	}
	rec.AddAddresses(resultAddrs(res)...)
	if err := r.store.Put(rec); err != nil {
		return fmt.Errorf("%w: allocation %s in network %q: %w", ErrIO, rec.ID, rec.Network, err)
	}
	return nil
}

// recorded returns the record of id in network as ifName, or nil.
func (r *hostRegistry) recorded(id, network, ifName string) *registry.Record {
	recs, _, err := r.store.Of(id)
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
func (r *hostRegistry) recordedIn(id, network string) bool {
	recs, _, err := r.store.Of(id)
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
func (r *hostRegistry) forget(id string, att attachment) error {
	start := time.Now()
	defer func() {
		r.logger.Debug("attachment forgotten", "alloc_id", id, "network", att.name(), "record", time.Since(start))
	}()
	if err := r.store.Remove(identity.Key{Network: att.name(), ID: id, IfName: att.ifName}); err != nil {
		return fmt.Errorf("%w: allocation %s in network %q: %w", ErrIO, id, att.name(), err)
	}
	return nil
}

// recordProofs is the proof store (footprint.ProofStore) of one detach:
// the attachment's record, created when the registry never saw it (an
// attachment from before the registry, found in libcni's cache).
type recordProofs struct {
	reg   *hostRegistry
	owner string
	spent time.Duration // in the registry: the registry's share of a detach
	fa    foundAttachment
	rec   *registry.Record
	read  bool
}

func (p *recordProofs) load() {
	if !p.read {
		start := time.Now()
		p.rec, p.read = p.reg.recorded(p.fa.req.id, p.fa.att.name(), p.fa.att.ifName), true
		p.spent += time.Since(start)
	}
}

// Recorded returns the addresses the attachment's record proves.
func (p *recordProofs) Recorded(att footprint.Attachment) []netip.Addr {
	if att != (footprint.Attachment{Network: p.fa.att.name(), ID: p.fa.req.id}) {
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
	if att != (footprint.Attachment{Network: p.fa.att.name(), ID: p.fa.req.id}) {
		return fmt.Errorf("no record of %s in this detach", att)
	}
	p.load()
	if p.rec == nil {
		p.rec = p.reg.recordOf(p.owner, p.fa.req, p.fa.att, "")
	}
	if !p.rec.AddAddresses(addrs...) && p.rec.State == registry.Detaching {
		return nil
	}
	p.rec.State = registry.Detaching
	start := time.Now()
	defer func() { p.spent += time.Since(start) }()
	return p.reg.store.Put(p.rec)
}

// Holding implements footprint.RecordedHolders: the attachments recorded
// as attached or being added that name one of addrs, whoever owns them.
// Every Teardown asks it for its own addresses, so only the records whose
// bytes may name one are decoded (registry.Naming).
// A registry that cannot be read holds nothing it can name; the files
// and rules are still asked.
func (r *hostRegistry) Holding(addrs []netip.Addr) map[netip.Addr][]footprint.Attachment {
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		want[a] = true
	}
	all, _ := r.store.Naming(addrs) // only the records that may name one are decoded
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
	return p.reg.store.Put(p.rec)
}

// recordedConf is the conflist rec's ADD ran with, else the known
// network's: a DEL after the conflist changed or went runs as the ADD did.
func (r *hostRegistry) recordedConf(rec registry.Record) (catalog.Conf, error) {
	known, err := r.nets.Known(rec.Network, true)
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

// ownerKey carries WithOwner's owner through an operation's context.
type ownerKey struct{}

// WithOwner returns ctx for operations on behalf of owner instead of
// Config.Owner: what they record is owner's, and a GC under it collects
// only owner's attachments. A program that serves several owners with one
// Configurator (cninet daemon serves each CNI runtime as an owner of its
// own) uses it; others set Config.Owner. An empty owner changes nothing.
func WithOwner(ctx context.Context, owner string) context.Context {
	if owner == "" {
		return ctx
	}
	return context.WithValue(ctx, ownerKey{}, owner)
}

// owners says whose attachments an operation makes and collects:
// Config.Owner, unless the caller names another (WithOwner).
type owners struct {
	configured string // Config.Owner
}

// ownerOf is the owner an operation under ctx acts for.
func (o owners) ownerOf(ctx context.Context) string {
	if owner, ok := ctx.Value(ownerKey{}).(string); ok {
		return owner
	}
	return o.configured
}

// attachments is Configurator.Attachments.
func (r *hostRegistry) attachments(ids []string) ([]AttachmentRecord, error) {
	if len(ids) > 0 {
		return r.attachmentsOf(ids)
	}
	all, err := r.store.Summaries() // what a listing shows: no record's conflist decoded
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

// attachmentsOf is Attachments of ids: each id's records, in the order
// of ids (each id's sorted by network and interface), an id given twice
// listed once.
func (r *hostRegistry) attachmentsOf(ids []string) ([]AttachmentRecord, error) {
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
		recs, damaged, err := r.store.Of(id)
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

// recordedNetNS returns the namespace a DEL of id's found attachments may
// enter, for a caller that was given none (GC): the one their records
// name, while it is still theirs — the same namespace, whose interface
// still holds a recorded address (workload.StillHolds) — else "". Entering
// it lets the plugins remove the workload's interfaces (and with them
// the host's ends of its veths); a namespace path that another workload
// reuses is never entered.
func (r *hostRegistry) recordedNetNS(id string, found []foundAttachment) string {
	recs, _, err := r.store.Of(id)
	if err != nil {
		return ""
	}
	netns := ""
	for _, fa := range found {
		at := slices.IndexFunc(recs, func(rec registry.Record) bool {
			return rec.Network == fa.att.name() && rec.IfName == fa.att.ifName
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
