package footprint

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/hostwork"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// view is the host as one run reads it: every listing, dump and file is
// read at most once and kept, so that all footprints judge the same
// state and none pays twice. A Teardown's view reads lazily, asking the
// cheap netlink probes first, so that its cost follows what one
// attachment can own; a GC's view (whole) lists whole tables once.
type view struct {
	ctx   context.Context
	host  Seams
	nets  map[string]Network // every network whose state may be on the host
	whole bool
	errs  *errList
	meter *hostwork.Meter // what the run's reads and writes take

	wholeWorkload bool // every attachment of the set's ids is being torn down (Cleaner.WholeWorkload)

	prior  hostFiles // the set's files as read before its DEL (proof a DEL erases)
	files  hostFiles // reservations and cached results, as read for this run
	ipt    [2]*iptView
	allIPT [2]*iptView // ipt before a sweep narrows it to one family
	nft    *nftView
	links  host.Links

	cachedOnce sync.Once
	cachedAll  []cachedResult // every known network's cached results (a Teardown reads them only if it must)
}

func newView(ctx context.Context, h Seams, nets map[string]Network, whole bool, errs *errList, m *hostwork.Meter) *view {
	v := &view{ctx: ctx, host: h, nets: nets, whole: whole, errs: errs, meter: m}
	for i, v6 := range []bool{false, true} {
		if h.IPTables == nil {
			continue
		}
		ipt, err := h.IPTables(v6)
		if err != nil {
			errs.add(fmt.Errorf("%s: %w: %w", familyName(v6), host.ErrIPTablesMissing, err))
			continue
		}
		v.ipt[i] = &iptView{ipt: iptables.BindContext(ctx, ipt), v6: v6, whole: whole, errs: errs, meter: m}
		v.allIPT[i] = v.ipt[i]
	}
	v.nft = &nftView{ctx: ctx, errs: errs, meter: m}
	if h.NFTables != nil {
		nft, err := h.NFTables()
		switch {
		case errors.Is(err, host.ErrNFTablesMissing):
		case err != nil:
			errs.add(fmt.Errorf("nftables: %w", err))
			v.nft.broken = true
		default:
			v.nft.nft = nft
		}
	}
	if h.Links != nil {
		links, err := h.Links()
		if err != nil {
			errs.add(fmt.Errorf("links: %w", err))
		} else {
			v.links = links
		}
	}
	return v
}

// families returns the iptables views that could be opened.
func (v *view) families() []*iptView {
	var fs []*iptView
	for _, f := range v.ipt {
		if f != nil {
			fs = append(fs, f)
		}
	}
	return fs
}

// errList collects a run's failures; every step runs even when another
// failed, and the run's error joins them all.
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (e *errList) add(err error) {
	if err == nil {
		return
	}
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

// errExcept joins the failures that are not target.
func (e *errList) errExcept(target error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []error
	for _, err := range e.errs {
		if !errors.Is(err, target) {
			out = append(out, err)
		}
	}
	return errors.Join(out...)
}

func (e *errList) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}

func familyName(v6 bool) string {
	if v6 {
		return "ip6tables"
	}
	return "iptables"
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
