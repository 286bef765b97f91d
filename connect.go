package cninet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/telemetry"
	"github.com/seed1280861d/cninet/internal/workload"
)

// connector is Connect and Disconnect: the parts they use.
type connector struct {
	requests
	owners
	registry *hostRegistry
	nets     *catalog.Networks
	find     *attachmentFinder
	lib      *libcni.CNIConfig // libcni's cache, where a runtime's attachments show
	cacheDir string
	ifs      ifNaming
	tel      *telemetry.Recorder
	logger   hclog.Logger
	attacher *attacher
	detacher *detacher
}

// connectNext is Connect on the next free interface name.
func (c *connector) connectNext(ctx context.Context, alloc *Allocation, network, netns string) (_ *NetworkStatus, err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpConnect, allocID(alloc), netns)
	defer func() { op.End(err) }()
	req, err := c.requestIn(alloc, netns, ErrInvalidArgument)
	if err != nil {
		return nil, err
	}
	if err := catalog.CheckName(network); err != nil {
		return nil, err
	}
	leave, err := c.registry.enter(ctx, req.id, true)
	if err != nil {
		return nil, err
	}
	defer leave()
	conf, err := c.nets.Known(network, false)
	if err != nil {
		return nil, fmt.Errorf("%w (connecting allocation %s)", err, req.id)
	}
	owner := c.ownerOf(ctx)
	found, _, err := c.find.of(alloc, req, owner, false) // an unreadable record of the network connected fails its preflight
	if err != nil {
		return nil, err
	}
	var used []string
	for _, fa := range c.find.attached(found) {
		used = append(used, fa.att.ifName)
		if fa.att.name() == network {
			return nil, fmt.Errorf("%w: allocation %s is attached to network %q as %s", ErrAlreadyAttached, req.id, network, fa.att.ifName)
		}
	}
	att := attachment{conf: conf, ifName: c.ifs.free(used)}
	a := c.attacher.attaching(owner, req, netns, len(used) > 0)
	if err := a.preflight(att); err != nil {
		return nil, err
	}
	up, restore := keepLoopback(c.logger, req.id, netns, []foundAttachment{{att: att}})
	defer restore()
	a.loUp = up
	return a.all(ctx, []attachment{att})
}

// disconnectNetwork is Disconnect of whichever interface the workload
// has in network.
func (c *connector) disconnectNetwork(ctx context.Context, alloc *Allocation, network, netns string) (err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpDisconnect, allocID(alloc), netns)
	defer func() { op.End(err) }()
	req, err := newRequest(alloc, c.ignoreHostIP)
	if err != nil {
		return err
	}
	if err := catalog.CheckName(network); err != nil {
		return err
	}
	leave, err := c.registry.enter(ctx, req.id, false)
	if err != nil {
		return err
	}
	defer leave()
	if _, err := c.nets.Known(network, true); err != nil {
		return fmt.Errorf("%w (disconnecting allocation %s)", err, req.id)
	}
	owner := c.ownerOf(ctx)
	found, unreadable, err := c.find.of(alloc, req, owner, true)
	if err != nil {
		return err
	}
	unreadable = slices.DeleteFunc(unreadable, func(d registry.Damaged) bool { return d.Key.Network != "" && d.Key.Network != network })
	attached := c.find.attached(found)
	found = slices.DeleteFunc(slices.Clone(attached), func(fa foundAttachment) bool { return fa.att.name() != network })
	if len(found) == 0 {
		c.logger.Debug("disconnect: not attached", "alloc_id", req.id, "network", network)
		return unreadableError(req.id, unreadable)
	}
	d := c.detacher.detaching(owner, netns, len(attached) > len(found) || len(unreadable) > 0)
	up, restore := keepLoopback(c.logger, req.id, netns, found)
	defer restore()
	d.settled, d.loUp = true, up
	return joinErrors([]error{d.all(ctx, found), unreadableError(req.id, unreadable)})
}

// keepLoopback, when found run the loopback plugin, notes whether the
// workload's lo is up (up: the detachment then leaves the loopback
// plugin out of its DELs, detachment.loUp) and returns a func that
// brings it up again if a DEL took it down meanwhile — one that could
// not leave the plugin out (an injected Config.CNI). The loopback
// plugin's DEL sets lo down, which is right when the workload goes,
// wrong when it loses one network of several (a Disconnect, a Connect
// rolled back).
func keepLoopback(logger hclog.Logger, id, netns string, found []foundAttachment) (up bool, restore func()) {
	if !slices.ContainsFunc(found, func(fa foundAttachment) bool { return runsLoopback(fa.att) }) {
		return false, func() {}
	}
	start := time.Now()
	if !workload.LoopbackUp(netns) {
		logger.Debug("workload's lo checked", "alloc_id", id, "check", time.Since(start))
		return false, func() {}
	}
	check := time.Since(start)
	return true, func() {
		start := time.Now()
		defer func() {
			logger.Debug("workload's lo checked", "alloc_id", id, "check", check, "restore", time.Since(start))
		}()
		if workload.LoopbackUp(netns) {
			return
		}
		if err := workload.SetLoopbackUp(netns); err != nil {
			logger.Warn("could not bring the workload's loopback interface up again after a DEL of the loopback plugin",
				"alloc_id", id, "netns", netns, "error", err)
		}
	}
}

// runsLoopback reports whether att's chain has the loopback plugin.
func runsLoopback(att attachment) bool {
	return slices.Contains(att.conf.Info.PluginTypes, "loopback")
}

// ConnectOptions name the interface of the attachment that Connect makes
// or Disconnect removes.
type ConnectOptions struct {
	// IfName is the workload's interface in the network, as a CNI runtime
	// names it (CNI_IFNAME): at most 15 bytes, no '/', ':' or white space,
	// not "." or "..". The runtime then owns the naming: only libcni's
	// cache, not Allocation.NetworkNames, says which interfaces the
	// workload's other networks use. "": the next free <prefix>N for
	// Connect; whichever interface the network has for Disconnect.
	IfName string
	// RuntimeID is the container id the runtime named, where the plugins
	// know the attachment by alloc.ID instead (cninet daemon's delegate
	// id of a container's second interface on a network): the records
	// the call writes name it (AttachmentRecord.RuntimeID). It needs
	// IfName, and must be a CNI container ID; "" or alloc.ID: alloc.ID is
	// the runtime's.
	RuntimeID string
}

// connectOptionsOf is the one ConnectOptions of operation's opts, checked
// (ErrInvalidArgument).
func connectOptionsOf(operation string, opts []ConnectOptions) (ConnectOptions, error) {
	o, err := optionsOf(operation, opts)
	if err != nil || o.RuntimeID == "" {
		return o, err
	}
	if o.IfName == "" {
		return ConnectOptions{}, fmt.Errorf("%w: %s: ConnectOptions.RuntimeID %q without IfName, want the interface the runtime named",
			ErrInvalidArgument, operation, o.RuntimeID)
	}
	if !footprint.IsContainerID(o.RuntimeID) {
		return ConnectOptions{}, fmt.Errorf("%w: %s: ConnectOptions.RuntimeID %q, want a CNI container ID (letters, digits, '_', '.', '-', starting with a letter or digit)",
			ErrInvalidArgument, operation, o.RuntimeID)
	}
	return o, nil
}

// runtimeIDOf is o.RuntimeID as a record of req names it: "" when req's
// id is the runtime's own.
func (o ConnectOptions) runtimeIDOf(req request) string {
	if o.RuntimeID == req.id {
		return ""
	}
	return o.RuntimeID
}

// connectAs is Connect as o.IfName, for o.RuntimeID.
func (c *connector) connectAs(ctx context.Context, alloc *Allocation, network, netns string, o ConnectOptions) (_ *NetworkStatus, err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpConnect, allocID(alloc), netns)
	defer func() { op.End(err) }()
	ifName := o.IfName
	req, err := c.namedRequest(alloc, network, netns, ifName, ErrInvalidArgument)
	if err != nil {
		return nil, err
	}
	req.runtimeID = o.runtimeIDOf(req)
	start := time.Now()
	leave, err := c.registry.enter(ctx, req.id, true)
	if err != nil {
		return nil, err
	}
	defer leave()
	locked := time.Now()
	conf, err := c.nets.Known(network, false)
	if err != nil {
		return nil, fmt.Errorf("%w (connecting allocation %s)", err, req.id)
	}
	cached, err := c.lib.GetCachedAttachments(req.id)
	if err != nil {
		return nil, fmt.Errorf("%w: reading libcni's cache in %s: %w", ErrIO, c.cacheDir, err)
	}
	for _, a := range cached {
		if a.Network == network || a.IfName == ifName {
			return nil, fmt.Errorf("%w: allocation %s is attached to network %q as %s (asked: network %q as %s)",
				ErrAlreadyAttached, req.id, a.Network, a.IfName, network, ifName)
		}
	}
	att := attachment{conf: conf, ifName: ifName}
	// The runtime may attach the same container to networks this
	// Configurator never sees: always as if others were there.
	a := c.attacher.attaching(c.ownerOf(ctx), req, netns, true)
	a.anyResult = true // the runtime reads the result itself: an L2-only network attaches too
	if err := a.preflight(att); err != nil {
		return nil, err
	}
	logFound(c.logger, telemetry.OpConnect, req.id, 1, locked.Sub(start), time.Since(locked))
	up, restore := keepLoopback(c.logger, req.id, netns, []foundAttachment{{att: att}})
	defer restore()
	a.loUp = up
	return a.all(ctx, []attachment{att})
}

// disconnectAs is Disconnect of o.IfName, for o.RuntimeID.
func (c *connector) disconnectAs(ctx context.Context, alloc *Allocation, network, netns string, o ConnectOptions) (err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpDisconnect, allocID(alloc), netns)
	defer func() { op.End(err) }()
	ifName := o.IfName
	req, err := c.namedRequest(alloc, network, "", ifName, nil)
	if err != nil {
		return err
	}
	req.runtimeID = o.runtimeIDOf(req)
	start := time.Now()
	leave, err := c.registry.enter(ctx, req.id, false)
	if err != nil {
		return err
	}
	defer leave()
	locked := time.Now()
	owner := c.ownerOf(ctx)
	rec := c.registry.recorded(req.id, network, ifName)
	conf, err := c.nets.Known(network, true)
	if err != nil && rec == nil {
		return fmt.Errorf("%w (disconnecting allocation %s)", err, req.id)
	}
	fa := foundAttachment{att: attachment{conf: conf, ifName: ifName}, req: req}
	if a := c.find.cachedAt(req.id, network, ifName); a != nil {
		fa.req, fa.cached, fa.settled = cachedCapabilities(cachedRequest(req, a), a), true, true
	}
	if d, err := c.registry.unreadableAt(req.id, network, ifName); err != nil || d != nil {
		if err == nil {
			err = unreadableError(req.id, []registry.Damaged{*d})
		}
		return err
	}
	if rec != nil && rec.Owner != owner {
		// Another owner's attachment: a DEL that names it may be libcni's
		// GC of a runtime that shares libcni's cache with its owner, which
		// DELs every cached attachment it was not told is valid. While its
		// namespace lives, nothing changes; once it is gone, nothing live
		// can be harmed, and the DEL cleans it.
		if !(&workload.Probe{}).RecordGone(*rec) {
			c.logger.Info("DEL of another owner's live attachment: nothing changed (its own owner, or the cninet CLI with --owner, detaches it)",
				"alloc_id", req.id, "network", network, "if_name", ifName, "recorded_owner", rec.Owner, "owner", owner, "netns", rec.NetNS)
			c.tel.Kept(ctx, telemetry.KeptOtherOwners, network)
			return nil
		}
		c.logger.Info("detaching another owner's attachment: its namespace is gone",
			"alloc_id", req.id, "network", network, "if_name", ifName, "recorded_owner", rec.Owner, "owner", owner, "netns", rec.NetNS)
	}
	if rec != nil { // the record knows best, even when the conflist changed or went
		conf, err := c.registry.recordedConf(*rec)
		if err != nil {
			return fmt.Errorf("%w (disconnecting allocation %s)", err, req.id)
		}
		fa.att.conf, fa.req, fa.cached = conf, recordedRequest(fa.req, *rec), true
		fa.settled = rec.State == registry.Attached
	}
	logFound(c.logger, telemetry.OpDisconnect, req.id, 1, locked.Sub(start), time.Since(locked))
	up, restore := keepLoopback(c.logger, req.id, netns, []foundAttachment{fa})
	defer restore()
	d := c.detacher.detaching(owner, netns, true) // as in connectAs: others may be there unseen
	d.exact, d.settled, d.loUp = true, true, up
	return d.all(ctx, []foundAttachment{fa})
}
