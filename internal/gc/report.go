package gc

import (
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// Scope is what GCOptions ask of one GC, checked: the value Collect hands
// down to its run, never through the context.
type Scope struct {
	Only map[string]bool // GCOptions.Networks; nil: every network
	// LiveIfs are GCOptions.LiveAttachments: the interfaces of each id
	// that are live (its others are not).
	LiveIfs map[string]map[string]bool
	Dry     bool // plan only (GCOptions.DryRun)
}

// spared reports whether a GC narrowed to only leaves network alone.
func spared(only map[string]bool, network string) bool {
	return only != nil && !only[network]
}

// progress logs how far a GC is once it has run longer than
// progressAfter, so that an operator watching a big sweep sees it move.
type progress struct {
	logger hclog.Logger
	start  time.Time
}

const progressAfter = 3 * time.Second

func newProgress(logger hclog.Logger) *progress {
	return &progress{logger: logger, start: time.Now()}
}

func (p *progress) step(what string, n int) {
	if elapsed := time.Since(p.start); elapsed >= progressAfter {
		p.logger.Info("GC progress: "+what, "items", n, "elapsed", elapsed.Round(time.Millisecond))
	}
}

// The kinds of what GC detached, besides the sweep's: cninet.GCKind's
// names for them.
const (
	KindCachedAttachment   footprint.Kind = "cached attachment"
	KindRecordedAttachment footprint.Kind = "recorded attachment"
)

// Report is what one GC removed, added to by its passes as they run.
type Report struct {
	mu         sync.Mutex
	detached   []footprint.Item  // the attachments GC detached (KindCachedAttachment, KindRecordedAttachment)
	swept      *footprint.Report // what the sweep removed
	unreadable []string          // registry files kept: no record this cninet can read
}

// Len is how many items were removed.
func (r *Report) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.detached) + r.swept.Len()
}

// IDs are the allocation IDs something was removed for, sorted.
func (r *Report) IDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.swept.IDs()
	for _, it := range r.detached {
		ids = append(ids, it.ID)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Detached are the attachments GC detached, in the order it did.
func (r *Report) Detached() []footprint.Item {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.detached)
}

// Swept is what the sweep removed (nil: it did not run).
func (r *Report) Swept() *footprint.Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.swept
}

// Unreadable are the registry files GC kept, sorted.
func (r *Report) Unreadable() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.unreadable))
}

func (r *Report) addUnreadable(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unreadable = append(r.unreadable, path)
}

func (r *Report) addDetached(it footprint.Item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.detached = append(r.detached, it)
}

func (r *Report) setSwept(rep *footprint.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.swept = rep
}

// items yields what r lists as telemetry counts it (telemetry.GCDone):
// an attachment GC detached went by CNI DEL, so its backend is "cni".
func (r *Report) items() iter.Seq[footprint.Item] {
	return func(yield func(footprint.Item) bool) {
		for _, it := range r.Detached() {
			it.Backend = "cni"
			if !yield(it) {
				return
			}
		}
		r.Swept().Each(yield)
	}
}
