package cninet

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/libcni"
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
// and nothing of any other network is touched. A CNI runtime's GC verb
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
	defer c.keepLoopbacks(only, liveAllocIDs)()
	return c.GC(context.WithValue(ctx, gcOnlyKey{}, only), liveAllocIDs)
}

// keepLoopbacks notes the workloads that a GC narrowed to only would
// detach from those networks while they stay attached elsewhere (per
// libcni's cache) and whose loopback interface is up, and returns a func
// that brings it up again where the loopback plugin's DEL took it down:
// that DEL is right when a workload goes, wrong when it keeps a network.
func (c *Configurator) keepLoopbacks(only map[string]bool, liveAllocIDs []string) (restore func()) {
	cached, err := c.lib.GetCachedAttachments("")
	if err != nil {
		return func() {}
	}
	live := map[string]bool{}
	for _, id := range liveAllocIDs {
		live[id] = true
	}
	elsewhere := map[string]bool{}
	for _, a := range cached {
		if !only[a.Network] {
			elsewhere[a.ContainerID] = true
		}
	}
	var keep []*libcni.NetworkAttachment
	for _, a := range cached {
		if only[a.Network] && !live[a.ContainerID] && elsewhere[a.ContainerID] && a.NetNS != "" && loopbackUp(a.NetNS) {
			keep = append(keep, a)
		}
	}
	return func() {
		for _, a := range keep {
			if loopbackUp(a.NetNS) {
				continue
			}
			if err := setLoopbackUp(a.NetNS); err != nil {
				c.logger.Warn("could not bring a workload's loopback interface up again after GC detached one of its networks",
					"alloc_id", a.ContainerID, "netns", a.NetNS, "error", err)
			}
		}
	}
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
