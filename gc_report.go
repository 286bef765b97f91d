package cninet

import (
	"encoding/json"
	"fmt"
	"iter"
	"slices"

	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/gc"
)

// GCKind says what kind of host state a GCItem was.
type GCKind string

// The kinds of state cleanup and GC remove. Each names the kind of the
// force cleanup's report item it stands for (gcItem converts one into the
// other as it is).
const (
	// GCCachedAttachment: an attachment libcni still had cached, detached
	// with CNI DEL by GC.
	GCCachedAttachment GCKind = "cached attachment"
	// GCRecordedAttachment: an attachment of this Configurator's owner
	// that the host registry recorded and whose allocation is not live,
	// detached with CNI DEL and force cleanup by GC (Detail: its
	// interface).
	GCRecordedAttachment GCKind = "recorded attachment"
	// GCRule: an iptables or ip6tables rule.
	GCRule GCKind = "iptables rule"
	// GCChain: an iptables or ip6tables chain.
	GCChain GCKind = "iptables chain"
	// GCReservation: a host-local IP reservation file.
	GCReservation GCKind = "ip reservation"
	// GCCachedResult: a libcni cached result file.
	GCCachedResult GCKind = "cached result"
	// GCNFTRule: an nftables rule of the plugins' nftables backends.
	GCNFTRule GCKind = "nftables rule"
	// GCLink: a network device in the host's namespace (the bandwidth
	// plugin's ifb device).
	GCLink GCKind = "network device"
	// GCTuningFile: the tuning plugin's saved interface settings.
	GCTuningFile GCKind = "tuning backup"
)

// GCItem is one piece of host state that was removed.
type GCItem struct {
	Kind    GCKind `json:"kind"`
	ID      string `json:"id"`                // the allocation ID that owned it
	Network string `json:"network,omitempty"` // its network, when the state names one
	Backend string `json:"backend,omitempty"` // iptables, ip6tables, nftables, files or links
	Detail  string `json:"detail"`            // the rule, chain, file or device
}

// GCReport lists what GC removed. It is kept compact — a GC after a bad
// night removes hundreds of thousands of rules, and the report must not
// cost more than the sweep — so its items are rendered when they are
// read: All and Removed render them, Len, Count and IDs render none. It
// marshals to JSON as {"removed": [GCItem...]} (and "unreadable": the
// registry files it kept, when any).
type GCReport struct {
	cached     []GCItem          // the attachments GC detached
	swept      *footprint.Report // what the sweep removed
	unreadable []string          // registry files kept: no record this cninet can read
}

// Len returns how many items were removed.
func (r *GCReport) Len() int {
	return len(r.cached) + r.swept.Len()
}

// All yields every removed item: the attachments libcni's GC detached
// first, then what the sweep removed, in the order it was removed. Each
// item is rendered as it is yielded, so ranging over a big report holds
// one item at a time.
func (r *GCReport) All() iter.Seq[GCItem] {
	return func(yield func(GCItem) bool) {
		for _, it := range r.cached {
			if !yield(it) {
				return
			}
		}
		r.swept.Each(func(it footprint.Item) bool { return yield(gcItem(it)) })
	}
}

// Removed returns every removed item, rendered at once: for a big report
// prefer All.
func (r *GCReport) Removed() []GCItem {
	out := make([]GCItem, 0, r.Len())
	for it := range r.All() {
		out = append(out, it)
	}
	return out
}

// Count returns how many removed items are of kind.
func (r *GCReport) Count(kind GCKind) int {
	n := r.swept.Count(footprint.Kind(kind))
	for _, it := range r.cached {
		if it.Kind == kind {
			n++
		}
	}
	return n
}

// IDs returns the allocation IDs something was removed for, sorted.
func (r *GCReport) IDs() []string {
	ids := r.swept.IDs()
	for _, it := range r.cached {
		ids = append(ids, it.ID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Unreadable returns the registry files GC found that are no record this
// cninet can read (damaged, or a newer cninet's), sorted: each was kept
// byte for byte, and nothing of its allocation was collected.
func (r *GCReport) Unreadable() []string {
	return slices.Sorted(slices.Values(r.unreadable))
}

// MarshalJSON renders the report as {"removed": [...]}, with
// "unreadable": [paths] when GC kept registry files it cannot read.
func (r *GCReport) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Removed    []GCItem `json:"removed"`
		Unreadable []string `json:"unreadable,omitempty"`
	}{r.Removed(), r.Unreadable()})
}

func gcItem(it footprint.Item) GCItem {
	return GCItem{Kind: GCKind(it.Kind), ID: it.ID, Network: it.Network, Backend: it.Backend, Detail: it.Detail}
}

// GCOptions narrow what GC collects, or make it a dry run.
type GCOptions struct {
	// Networks, when not empty, are the only networks collected: in
	// them every attachment whose allocation ID is not live is removed,
	// and what the other networks hold is left alone, whatever its
	// allocation ID, and counts as live — the same container's
	// attachments there included (the dead ones here are detached as
	// Disconnect with ConnectOptions.IfName detaches, whose DEL never
	// reaches the container's other attachments). A CNI runtime's GC
	// command (cni.dev/valid-attachments) has this shape: it lists the
	// live attachments of one network. Each must be a network this
	// Configurator knows (ErrNetworkNotFound before anything runs).
	// Empty: every network.
	Networks []string
	// LiveAttachments are live attachments named by interface, as a CNI
	// runtime's GC command names them (cni.dev/valid-attachments): an
	// attachment is live when its allocation ID is in liveAllocIDs, or
	// its ID and interface name are here. So an allocation listed here
	// only keeps the interfaces listed: its attachment under another
	// interface is collected, unless the same network holds one of its
	// listed interfaces too (the force cleanup of a network's attachment
	// acts on its allocation ID in that network: it would reach the live
	// one). The sweep of what no record or cache remembers leaves every
	// allocation listed here alone.
	LiveAttachments []GCAttachment
	// DryRun plans and changes nothing: the report lists what GC would
	// remove — the recorded and cached attachments it would detach, then
	// every rule, chain, file and device its sweep would remove (some of
	// which the detaches' DELs would remove first) — and no plugin runs.
	// It does not take the host's GC lock.
	DryRun bool
}

// GCAttachment names one attachment by allocation ID and interface name.
type GCAttachment struct {
	ID, IfName string
}

// gcReportOf is the GCReport of what one GC removed (nil: none).
func gcReportOf(r *gc.Report) *GCReport {
	if r == nil {
		return nil
	}
	out := &GCReport{swept: r.Swept(), unreadable: r.Unreadable()}
	for _, it := range r.Detached() {
		out.cached = append(out.cached, gcItem(it))
	}
	return out
}

// gcScopeOf checks o and returns the GC it asks for: every network it names
// known, every live attachment a container ID and an interface name
// (ErrInvalidArgument, ErrNetworkNotFound).
func gcScopeOf(o GCOptions, nets *catalog.Networks) (gc.Scope, error) {
	s := gc.Scope{Dry: o.DryRun}
	for _, a := range o.LiveAttachments {
		if !footprint.IsContainerID(a.ID) || CheckIfName(a.IfName) != nil {
			return gc.Scope{}, fmt.Errorf("%w: GCOptions.LiveAttachments names allocation %q as interface %q, want a CNI container ID and an interface name",
				ErrInvalidArgument, a.ID, a.IfName)
		}
		if s.LiveIfs == nil {
			s.LiveIfs = map[string]map[string]bool{}
		}
		if s.LiveIfs[a.ID] == nil {
			s.LiveIfs[a.ID] = map[string]bool{}
		}
		s.LiveIfs[a.ID][a.IfName] = true
	}
	if len(o.Networks) == 0 {
		return s, nil
	}
	s.Only = make(map[string]bool, len(o.Networks))
	for _, name := range o.Networks {
		if err := catalog.CheckName(name); err != nil {
			return gc.Scope{}, err
		}
		if _, err := nets.Known(name, false); err != nil {
			return gc.Scope{}, fmt.Errorf("%w (GC)", err)
		}
		s.Only[name] = true
	}
	return s, nil
}
