package cninet

import (
	"context"
	"errors"
	"fmt"
)

// GCOptions narrows what GCWith collects.
type GCOptions struct {
	// Networks, when not empty, are the only networks collected: what
	// the other networks hold is left alone, whatever its allocation ID,
	// and counts as live (nothing a DEL takes from it is lost). Each must
	// be a network this Configurator knows. Empty: every network, as GC.
	Networks []string
}

// GCWith is GC narrowed by opts: with opts.Networks, in those networks
// every attachment whose allocation ID is not in liveAllocIDs is removed
// and nothing of any other network is touched, the same container's
// attachments there included (the cached ones are detached as
// DisconnectWith does, then GC sweeps what no cache remembers). A CNI runtime's GC verb
// (cni.dev/valid-attachments) has this shape: it lists the live
// attachments of one network only. An unknown network is an
// ErrNetworkNotFound error before anything runs.
func (c *Configurator) GCWith(ctx context.Context, liveAllocIDs []string, opts GCOptions) (*GCReport, error) {
	if len(opts.Networks) == 0 {
		return c.GC(ctx, liveAllocIDs)
	}
	only := make(map[string]bool, len(opts.Networks))
	for _, name := range opts.Networks {
		if err := checkNetworkName(name); err != nil {
			return nil, err
		}
		if _, err := c.knownConf(name, false); err != nil {
			return nil, fmt.Errorf("%w (GC)", err)
		}
		only[name] = true
	}
	stale, detachErr := c.detachStale(ctx, only, liveAllocIDs)
	report, err := c.GC(context.WithValue(ctx, gcOnlyKey{}, only), liveAllocIDs)
	if report != nil {
		for _, it := range stale {
			report.addCached(it)
		}
	}
	return report, errors.Join(detachErr, err)
}

// detachStale detaches, as DisconnectWith does, every attachment of the
// networks in only that libcni's cache holds and whose allocation is not
// live: before GC, whose libcni GC would DEL whole chains, and portmap's
// nftables DEL deletes by the bare container id on every network, the
// spared ones included. DisconnectWith's DEL never reaches the same
// container's other attachments, and keeps its loopback interface up.
func (c *Configurator) detachStale(ctx context.Context, only map[string]bool, liveAllocIDs []string) ([]GCItem, error) {
	cached, err := c.lib.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("%w: reading libcni's cache in %s: %w", ErrCleanupFailed, c.cacheDir, err)
	}
	live := make(map[string]bool, len(liveAllocIDs))
	for _, id := range liveAllocIDs {
		live[id] = true
	}
	var detached []GCItem
	var errs []error
	for _, a := range cached {
		if !only[a.Network] || live[a.ContainerID] {
			continue
		}
		err := c.DisconnectWith(ctx, &Allocation{ID: a.ContainerID}, a.Network, a.NetNS, ConnectOptions{IfName: a.IfName})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		detached = append(detached, GCItem{Kind: GCCachedAttachment, ID: a.ContainerID, Network: a.Network, Detail: a.IfName})
	}
	return detached, errors.Join(errs...)
}

// gcOnlyKey carries GCWith's networks through GC's context, so that GC's
// signature stays as it is.
type gcOnlyKey struct{}

// gcOnly returns the networks a GC is narrowed to; nil: every network.
func gcOnly(ctx context.Context) map[string]bool {
	only, _ := ctx.Value(gcOnlyKey{}).(map[string]bool)
	return only
}

// spared reports whether a GC narrowed to only leaves network alone.
func spared(only map[string]bool, network string) bool {
	return only != nil && !only[network]
}
