package cninet

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/telemetry"
	"github.com/seed1280861d/cninet/internal/workload"
)

// connector is Connect and Disconnect: the parts they use.
type connector struct {
	requests
	attachments.Owners
	registry *attachments.Registry
	nets     *catalog.Networks
	find     *attachments.Finder
	lib      *libcni.CNIConfig // libcni's cache, where a runtime's attachments show
	cacheDir string
	ifs      attachments.IfNaming
	tel      *telemetry.Recorder
	logger   hclog.Logger
	attacher *attacher
	detacher *attachments.Detacher
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
	leave, err := c.registry.Enter(ctx, req.ID, true)
	if err != nil {
		return nil, err
	}
	defer leave()
	conf, err := c.nets.Known(network, false)
	if err != nil {
		return nil, fmt.Errorf("%w (connecting allocation %s)", err, req.ID)
	}
	owner := c.OwnerOf(ctx)
	found, _, err := c.find.Of(req, owner, false) // an unreadable record of the network connected fails its preflight
	if err != nil {
		return nil, err
	}
	var used []string
	for _, fa := range c.find.Attached(found) {
		used = append(used, fa.Att.IfName)
		if fa.Att.Name() == network {
			return nil, fmt.Errorf("%w: allocation %s is attached to network %q as %s", ErrAlreadyAttached, req.ID, network, fa.Att.IfName)
		}
	}
	att := attachments.Attachment{Conf: conf, IfName: c.ifs.Free(used)}
	a := c.attacher.attaching(owner, req, netns, len(used) > 0)
	if err := a.preflight(att); err != nil {
		return nil, err
	}
	up, restore := attachments.KeepLoopback(c.logger, req.ID, netns, []attachments.Found{{Att: att}})
	defer restore()
	a.loUp = up
	return a.all(ctx, []attachments.Attachment{att})
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
	leave, err := c.registry.Enter(ctx, req.ID, false)
	if err != nil {
		return err
	}
	defer leave()
	if _, err := c.nets.Known(network, true); err != nil {
		return fmt.Errorf("%w (disconnecting allocation %s)", err, req.ID)
	}
	owner := c.OwnerOf(ctx)
	found, unreadable, err := c.find.Of(req, owner, true)
	if err != nil {
		return err
	}
	unreadable = slices.DeleteFunc(unreadable, func(d registry.Damaged) bool { return d.Key.Network != "" && d.Key.Network != network })
	attached := c.find.Attached(found)
	found = slices.DeleteFunc(slices.Clone(attached), func(fa attachments.Found) bool { return fa.Att.Name() != network })
	if len(found) == 0 {
		c.logger.Debug("disconnect: not attached", "alloc_id", req.ID, "network", network)
		return attachments.UnreadableError(req.ID, unreadable)
	}
	d := c.detacher.Detaching(owner, netns, len(attached) > len(found) || len(unreadable) > 0)
	up, restore := attachments.KeepLoopback(c.logger, req.ID, netns, found)
	defer restore()
	d.Settled, d.LoUp = true, up
	return errs.Join([]error{d.All(ctx, found), attachments.UnreadableError(req.ID, unreadable)})
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
func (o ConnectOptions) runtimeIDOf(req attachments.Request) string {
	if o.RuntimeID == req.ID {
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
	req.RuntimeID = o.runtimeIDOf(req)
	start := time.Now()
	leave, err := c.registry.Enter(ctx, req.ID, true)
	if err != nil {
		return nil, err
	}
	defer leave()
	locked := time.Now()
	conf, err := c.nets.Known(network, false)
	if err != nil {
		return nil, fmt.Errorf("%w (connecting allocation %s)", err, req.ID)
	}
	cached, err := c.lib.GetCachedAttachments(req.ID)
	if err != nil {
		return nil, fmt.Errorf("%w: reading libcni's cache in %s: %w", ErrIO, c.cacheDir, err)
	}
	for _, a := range cached {
		if a.Network == network || a.IfName == ifName {
			return nil, fmt.Errorf("%w: allocation %s is attached to network %q as %s (asked: network %q as %s)",
				ErrAlreadyAttached, req.ID, a.Network, a.IfName, network, ifName)
		}
	}
	att := attachments.Attachment{Conf: conf, IfName: ifName}
	// The runtime may attach the same container to networks this
	// Configurator never sees: always as if others were there.
	a := c.attacher.attaching(c.OwnerOf(ctx), req, netns, true)
	a.anyResult = true // the runtime reads the result itself: an L2-only network attaches too
	if err := a.preflight(att); err != nil {
		return nil, err
	}
	attachments.LogFound(c.logger, telemetry.OpConnect, req.ID, 1, locked.Sub(start), time.Since(locked))
	up, restore := attachments.KeepLoopback(c.logger, req.ID, netns, []attachments.Found{{Att: att}})
	defer restore()
	a.loUp = up
	return a.all(ctx, []attachments.Attachment{att})
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
	req.RuntimeID = o.runtimeIDOf(req)
	start := time.Now()
	leave, err := c.registry.Enter(ctx, req.ID, false)
	if err != nil {
		return err
	}
	defer leave()
	locked := time.Now()
	owner := c.OwnerOf(ctx)
	rec := c.registry.Recorded(req.ID, network, ifName)
	conf, err := c.nets.Known(network, true)
	if err != nil && rec == nil {
		return fmt.Errorf("%w (disconnecting allocation %s)", err, req.ID)
	}
	fa := attachments.Found{Att: attachments.Attachment{Conf: conf, IfName: ifName}, Req: req}
	if a := c.find.CachedAt(req.ID, network, ifName); a != nil {
		fa.Req, fa.Cached, fa.Settled = attachments.CachedCapabilities(attachments.CachedRequest(req, a), a), true, true
	}
	if d, err := c.registry.UnreadableAt(req.ID, network, ifName); err != nil || d != nil {
		if err == nil {
			err = attachments.UnreadableError(req.ID, []registry.Damaged{*d})
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
				"alloc_id", req.ID, "network", network, "if_name", ifName, "recorded_owner", rec.Owner, "owner", owner, "netns", rec.NetNS)
			c.tel.Kept(ctx, telemetry.KeptOtherOwners, network)
			return nil
		}
		c.logger.Info("detaching another owner's attachment: its namespace is gone",
			"alloc_id", req.ID, "network", network, "if_name", ifName, "recorded_owner", rec.Owner, "owner", owner, "netns", rec.NetNS)
	}
	if rec != nil { // the record knows best, even when the conflist changed or went
		conf, err := c.registry.RecordedConf(*rec)
		if err != nil {
			return fmt.Errorf("%w (disconnecting allocation %s)", err, req.ID)
		}
		fa.Att.Conf, fa.Req, fa.Cached = conf, attachments.RecordedRequest(fa.Req, *rec), true
		fa.Settled = rec.State == registry.Attached
	}
	attachments.LogFound(c.logger, telemetry.OpDisconnect, req.ID, 1, locked.Sub(start), time.Since(locked))
	up, restore := attachments.KeepLoopback(c.logger, req.ID, netns, []attachments.Found{fa})
	defer restore()
	d := c.detacher.Detaching(owner, netns, true) // as in connectAs: others may be there unseen
	d.Exact, d.Settled, d.LoUp = true, true, up
	return d.All(ctx, []attachments.Found{fa})
}
