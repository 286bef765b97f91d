package cninet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/drift"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/repairwatch"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// checker is Check and Drifts: the parts they use, with the builder of
// live attachments and the repairer.
type checker struct {
	requests
	attachments.Owners
	registry *attachments.Registry
	nets     *catalog.Networks
	plugins  *catalog.Plugins
	find     *attachments.Finder
	seams    *attachments.Seams
	drivers  *attachments.Drivers
	cacheDir string
	tel      *telemetry.Recorder
	logger   hclog.Logger
	lives    *drift.LiveBuilder
	repairer *drift.Repairer
}

// CheckOptions tune Check.
type CheckOptions struct {
	// Network and IfName name the one attachment to check: the workload's
	// interface IfName in Network (CNI_IFNAME and the network's name, as a
	// runtime's CHECK gives them). Both, or neither for every network.
	Network, IfName string
	// Repair restores what is missing, in place: same address, MAC and
	// interface, no restart of the workload, nothing of another
	// attachment touched, no rule twice. The plugins' own ADD writes what
	// they wrote; what only cninet can write again it writes as they do.
	// Only attachments whose record says attached are repaired, under
	// their lock.
	Repair bool
}

// checkAll is Check of every network of the workload.
func (c *checker) checkAll(ctx context.Context, alloc *Allocation, netns string, repair bool) (err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpCheck, allocID(alloc), netns)
	defer func() { op.End(err) }()
	req, err := c.requestIn(alloc, netns, ErrCheckFailed) // a namespace that is gone is a verdict: rebuild it
	if err != nil {
		return err
	}
	leave, err := c.registry.Enter(ctx, req.ID, false)
	if err != nil {
		return err
	}
	defer leave()
	found, unreadable, err := c.find.Of(req, c.OwnerOf(ctx), false)
	if err != nil {
		return err
	}
	// An unreadable record's attachment is not checked, nor repaired: the
	// error names its file.
	return errs.Join(slices.DeleteFunc([]error{c.checkFound(ctx, c.find.Attached(found), netns, repair), attachments.UnreadableError(req.ID, unreadable)},
		func(err error) bool { return err == nil }))
}

// checkOne is Check of the attachment of ifName in network
// (CheckOptions): the one the registry records, else the one libcni's
// cache holds.
func (c *checker) checkOne(ctx context.Context, alloc *Allocation, network, netns, ifName string, repair bool) (err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpCheck, allocID(alloc), netns)
	defer func() { op.End(err) }()
	req, err := c.namedRequest(alloc, network, netns, ifName, ErrCheckFailed)
	if err != nil {
		return err
	}
	leave, err := c.registry.Enter(ctx, req.ID, false)
	if err != nil {
		return err
	}
	defer leave()
	conf, err := c.nets.Known(network, false)
	if err != nil {
		return fmt.Errorf("%w (checking allocation %s)", err, req.ID)
	}
	fa := attachments.Found{Att: attachments.Attachment{Conf: conf, IfName: ifName}, Req: req}
	if rec := c.registry.Recorded(req.ID, network, ifName); rec != nil && rec.State != registry.Adding {
		if conf, err := c.registry.RecordedConf(*rec); err == nil {
			fa.Att.Conf = conf
		}
		fa.Req, fa.Cached, fa.Settled = attachments.RecordedRequest(req, *rec), true, rec.State == registry.Attached
	} else if a := c.find.CachedAt(req.ID, network, ifName); a != nil {
		fa.Req, fa.Cached, fa.Settled = attachments.CachedCapabilities(attachments.CachedRequest(req, a), a), true, true
	} else {
		return fmt.Errorf("%w: allocation %s is not attached to network %q as %s (neither the host registry in %s nor libcni's cache in %s has it)",
			ErrCheckFailed, req.ID, network, ifName, c.registry.Store.Dir(), c.cacheDir)
	}
	return c.checkFound(ctx, []attachments.Found{fa}, netns, repair)
}

// checkFound checks found: cninet's own check of every attachment in one
// read of the host (with repair, restoring what is missing first), then
// the plugins' CHECK of each that is whole.
func (c *checker) checkFound(ctx context.Context, found []attachments.Found, netns string, repair bool) error {
	atts := c.lives.CheckedOf(found, netns)
	var drifts []Drift
	var failed, unsupported, repairErrs []error
	for i, r := range c.driftCheck(ctx, atts, repair) {
		fa, h := atts[i].Found, r.Health
		if len(h.Missing) > 0 {
			drifts = append(drifts, driftOf(h, r.Repaired))
			if r.Err != nil && !errors.Is(r.Err, footprint.ErrNotInPlace) { // ErrNotRepairable says that
				repairErrs = append(repairErrs, fmt.Errorf("repairing allocation %s in network %q: %w", fa.Req.ID, fa.Att.Name(), r.Err))
			}
			continue
		}
		if h.Err != nil {
			c.logger.Warn("drift check incomplete: what it could not read is left to the plugins' CHECK", "alloc_id", fa.Req.ID,
				"network", fa.Att.Name(), "error", h.Err)
		}
		switch err := c.checkNetwork(ctx, fa.Req, fa.Att, netns); {
		case errors.Is(err, ErrCheckFailed):
			failed = append(failed, err)
		case err != nil:
			unsupported = append(unsupported, err)
		}
	}
	if err := driftError(drifts); err != nil {
		failed = append(append([]error{err}, repairErrs...), failed...) // a repair's cause keeps its sentinel (ErrPluginMissing, ctx's)
	}
	if len(failed) > 0 {
		return errs.Join(failed)
	}
	return errs.Join(unsupported)
}

// checkNetwork runs the plugins' CHECK on one network of the attachment,
// without the plugins whose CHECK is known to be unsound here.
func (c *checker) checkNetwork(ctx context.Context, req attachments.Request, att attachments.Attachment, netns string) (err error) {
	ctx, op := c.tel.StartNetwork(ctx, telemetry.OpCheckNetwork, att.Name(), att.IfName, req.ID, netns)
	defer func() { op.End(err) }()
	if att.Conf.Info.DisableCheck {
		return fmt.Errorf("%w: network %q sets disableCheck", ErrCheckUnsupported, att.Name())
	}
	driver := c.drivers.DriverFor(att)
	omit := unsoundChecks(ctx, c.plugins, driver, att)
	if err := driver.Check(ctx, req, att, netns, omit); err != nil {
		if why := knownFalseFailure(ctx, c.plugins, driver, att, err); why != "" {
			return fmt.Errorf("%w: allocation %s in network %q: %s: %w", ErrCheckUnsupported, req.ID, att.Name(), why, err)
		}
		return fmt.Errorf("%w: allocation %s in network %q: %w", ErrCheckFailed, req.ID, att.Name(), err)
	}
	return nil
}

// unsoundChecks returns the plugins of att's chain whose CHECK is known
// to fail on healthy attachments here, which cninet's own check stands in
// for: portmap releases before CNI spec 1.1 (Debian's 1.1.1 among them)
// check the DNAT chain of both IP families for every address. Where the
// driver cannot leave a plugin out (an injected Config.CNI), none.
func unsoundChecks(ctx context.Context, p *catalog.Plugins, driver attachments.NetDriver, att attachments.Attachment) []string {
	if !driver.RunsPlugins() || !slices.Contains(att.Conf.Info.PluginTypes, "portmap") {
		return nil
	}
	if p.Supports(ctx, "portmap", "1.1.0") {
		return nil
	}
	return []string{"portmap"}
}

// knownFalseFailure recognises CHECK failures that are plugin bugs, not
// unhealthy attachments, and says why: where a chain runs whole (an
// injected Config.CNI), portmap's before CNI spec 1.1 (unsoundChecks).
//
// The bridge plugin's CHECK runs the IPAM plugin whether or not its
// config names one, so on an L2-only network (no IPAM) it always fails
// with "no plugin name provided".
func knownFalseFailure(ctx context.Context, p *catalog.Plugins, driver attachments.NetDriver, att attachments.Attachment, err error) string {
	msg := err.Error()
	if att.Conf.Info.NoIPAM && strings.Contains(msg, "no plugin name provided") {
		return "the network names no IPAM plugin (L2 only), and a plugin's CHECK ran one all the same"
	}
	if !driver.RunsPlugins() || !strings.Contains(msg, "could not check ipv") || !strings.Contains(msg, "dnat") {
		return ""
	}
	if p.Supports(ctx, "portmap", "1.1.0") {
		return ""
	}
	return "this portmap release (before CNI spec 1.1) checks both IP families' DNAT chains for every address, so its CHECK fails on healthy attachments"
}

// DriftError is what Check found missing from live attachments, by
// attachment; errors.As reaches it from an ErrCheckFailed error. With
// CheckOptions.Repair it is what is still missing after the repair.
type DriftError struct {
	Drifts []Drift
}

// Drift is what one attachment misses.
type Drift struct {
	// ID is the container id the plugins know the attachment by.
	ID, Network, IfName string
	// Missing names each missing piece: its backend, kind and what it is,
	// e.g. `iptables iptables rule nat CNI-HOSTPORT-DNAT: jump of tcp
	// ports 8080 to CNI-DN-…`.
	Missing []string
	// Unrepairable names those of Missing that cannot be restored while
	// the workload lives (ErrNotRepairable): re-create the workload.
	Unrepairable []string
	// Repaired names what a repair restored (CheckOptions.Repair).
	Repaired []string
	// Incomplete, when not empty, says what the check could not read
	// (Drifts): what it would have shown is not in Missing.
	Incomplete string
}

func (e *DriftError) Error() string {
	parts := make([]string, len(e.Drifts))
	for i, d := range e.Drifts {
		parts[i] = d.String()
	}
	return strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrCheckFailed) hold for a DriftError, and
// ErrNotRepairable when something cannot be repaired in place.
func (e *DriftError) Is(target error) bool {
	switch target {
	case ErrCheckFailed:
		return true
	case ErrNotRepairable:
		for _, d := range e.Drifts {
			if len(d.Unrepairable) > 0 {
				return true
			}
		}
	}
	return false
}

func (d Drift) String() string {
	s := fmt.Sprintf("allocation %s in network %q as %s: %d missing: %s", d.ID, d.Network, d.IfName, len(d.Missing), strings.Join(d.Missing, ", "))
	if len(d.Unrepairable) > 0 {
		s += fmt.Sprintf(" (%d cannot be restored in place: re-create the workload)", len(d.Unrepairable))
	}
	return s
}

// driftOf is the Drift of a health that is not whole, with what a
// repair restored.
func driftOf(h footprint.Health, repaired []footprint.Missing) Drift {
	a := h.Live
	d := Drift{ID: a.ID, Network: a.Network, IfName: a.IfName}
	for _, m := range h.Missing {
		d.Missing = append(d.Missing, m.String())
		if m.Restore == footprint.NotInPlace {
			d.Unrepairable = append(d.Unrepairable, m.String())
		}
	}
	for _, m := range repaired {
		d.Repaired = append(d.Repaired, m.String())
	}
	return d
}

// driftError is the ErrCheckFailed error of drifts (nil when none).
func driftError(drifts []Drift) error {
	if len(drifts) == 0 {
		return nil
	}
	return &DriftError{Drifts: drifts}
}

// asDriftError returns the DriftError in err, or nil.
func asDriftError(err error) *DriftError {
	var de *DriftError
	if errors.As(err, &de) {
		return de
	}
	return nil
}

// driftCheck checks atts in one read of the host and, with repair,
// restores what each repairable one lacks, then checks those again in one
// more read. The caller holds their ids' locks.
func (c *checker) driftCheck(ctx context.Context, atts []drift.Checked, repair bool) []drift.Result {
	var lives []*footprint.Live
	at := make([]int, len(atts)) // atts[i]'s place in lives, or -1
	for i, ca := range atts {
		at[i] = -1
		if ca.Known() {
			at[i] = len(lives)
			lives = append(lives, ca.Live)
		}
	}
	checker := footprint.NewChecker(ctx, c.seams.All())
	checked := checker.Check(lives)
	out := make([]drift.Result, len(atts))
	for i := range atts {
		out[i].Health = footprint.Health{Live: atts[i].Live}
		if at[i] >= 0 {
			out[i].Health = checked[at[i]]
		}
		c.tel.Checked(ctx, out[i].Health)
	}
	if !repair {
		return out
	}
	var again []int
	restored := make([][]footprint.Missing, len(atts))
	starts := make([]time.Time, len(atts))
	for i := range out {
		if len(out[i].Health.Missing) == 0 || !atts[i].Repairable() {
			continue
		}
		starts[i] = time.Now()
		restored[i], out[i].Err = c.repairer.RepairOne(ctx, checker, atts[i], out[i].Health)
		again = append(again, i)
	}
	if len(again) == 0 {
		return out
	}
	recheck := make([]*footprint.Live, len(again))
	for j, i := range again {
		recheck[j] = atts[i].Live
	}
	for j, h := range footprint.NewChecker(ctx, c.seams.All()).Check(recheck) {
		i := again[j]
		out[i].Health = h
		out[i].Repaired = repairwatch.Restored(restored[i], h)
		repairwatch.LogRepair(c.logger, atts[i].Live, h, out[i].Repaired, out[i].Err, time.Since(starts[i]))
	}
	return out
}

// drifts is Configurator.Drifts.
func (c *checker) drifts(ctx context.Context, ids []string) ([]Drift, error) {
	var recs []registry.Record
	var unread []error
	if len(ids) == 0 {
		all, err := c.registry.Store.All()
		recs = all.Records
		unread = append(unread, err)
		for _, d := range all.Damaged {
			unread = append(unread, d)
		}
	} else {
		for _, id := range ids {
			if err := checkContainerID(id); err != nil {
				return nil, err
			}
			of, damaged, err := c.registry.Store.Of(id)
			recs = append(recs, of...)
			unread = append(unread, err)
			for _, d := range damaged {
				unread = append(unread, d)
			}
		}
	}
	var atts []drift.Checked
	for i := range recs {
		if recs[i].State != registry.Attached {
			continue
		}
		if ca, ok := c.lives.CheckedOfRecord(&recs[i]); ok {
			atts = append(atts, ca)
		}
	}
	results := c.driftCheck(ctx, atts, false)
	out := make([]Drift, len(results))
	for i, r := range results {
		out[i] = driftOf(r.Health, nil)
		if r.Health.Err != nil {
			out[i].Incomplete = r.Health.Err.Error()
		}
	}
	return out, listingError(slices.DeleteFunc(unread, func(err error) bool { return err == nil }))
}
