package cninet

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/telemetry"
	"github.com/seed1280861d/cninet/internal/workload"
)

// prober is Status and Unrecorded: the parts they use, and when Status
// last reported unrecorded attachments.
type prober struct {
	cni          cni.CNI
	lib          *libcni.CNIConfig
	cacheDir     string
	nets         *catalog.Networks
	plugins      *catalog.Plugins
	registry     *attachments.Registry
	tel          *telemetry.Recorder
	logger       hclog.Logger
	unrecordedAt atomic.Int64 // UnixNano
}

// status is Status of every network.
func (p *prober) status(ctx context.Context) (err error) {
	ctx, op := p.tel.StartOp(ctx, telemetry.OpStatus, "", "")
	defer func() { op.End(err) }()
	def, err := p.nets.Current()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	var problems []error
	for _, conf := range p.nets.All(false) {
		err := p.networkReady(ctx, conf, conf.Info.Name == def.Info.Name)
		p.tel.NoteReady(conf.Info.Name, err)
		if err != nil {
			problems = append(problems, err)
		}
	}
	p.logUnrecorded()
	if len(problems) > 0 {
		return fmt.Errorf("%w: %w", ErrNotReady, errs.Join(problems))
	}
	return nil
}

// UnrecordedAttachment is an attachment that libcni's cache (CacheDir)
// holds in one of this Configurator's networks and that no record of the
// host registry claims: another tool's (a runtime's own CNI, cnitool, a
// cninet with another StateDir), or one from before the registry. GC
// collects it, whatever its live set says, only once its namespace is
// gone; Teardown of its ID detaches it.
type UnrecordedAttachment struct {
	Network, ID, IfName, NetNS string
	// NamespaceGone says its namespace is provably gone: the next GC
	// collects it.
	NamespaceGone bool
}

// unrecorded is Configurator.Unrecorded.
func (p *prober) unrecorded() ([]UnrecordedAttachment, error) {
	cached, err := p.lib.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("%w: reading libcni's cache in %s: %w", ErrIO, p.cacheDir, err)
	}
	all, err := p.registry.Store.Summaries()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the host registry: %w", ErrIO, err)
	}
	claimed := map[identity.Key]bool{}
	for _, rec := range all.Summaries {
		claimed[rec.Key] = true
	}
	var ns workload.Probe
	var out []UnrecordedAttachment
	for _, a := range cached {
		k := identity.Key{Network: a.Network, ID: a.ContainerID, IfName: a.IfName}
		if _, err := p.nets.Known(a.Network, false); err != nil || claimed[k] ||
			slices.ContainsFunc(all.Damaged, func(d registry.Damaged) bool { return d.Covers(k) }) {
			continue
		}
		out = append(out, UnrecordedAttachment{Network: a.Network, ID: a.ContainerID, IfName: a.IfName, NetNS: a.NetNS, NamespaceGone: ns.Gone(a.NetNS, 0)})
	}
	slices.SortFunc(out, func(a, b UnrecordedAttachment) int {
		return cmp.Or(strings.Compare(a.Network, b.Network), strings.Compare(a.ID, b.ID), strings.Compare(a.IfName, b.IfName))
	})
	return out, nil
}

// unrecordedEvery bounds how often Status reads libcni's cache and the
// registry to report unrecorded attachments: Status is a probe.
const unrecordedEvery = time.Minute

// logUnrecorded reports Unrecorded in the log, per network, unless it
// did less than unrecordedEvery ago.
func (p *prober) logUnrecorded() {
	now := time.Now()
	if last := p.unrecordedAt.Load(); last != 0 && now.Sub(time.Unix(0, last)) < unrecordedEvery || !p.unrecordedAt.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	unrecorded, err := p.unrecorded()
	if err != nil {
		p.logger.Debug("attachments no record claims not reported", "error", err)
		return
	}
	byNetwork := map[string][]string{}
	for _, a := range unrecorded {
		byNetwork[a.Network] = append(byNetwork[a.Network], a.ID)
	}
	for _, network := range slices.Sorted(maps.Keys(byNetwork)) {
		ids := byNetwork[network]
		p.logger.Info("attachments no record of the host registry claims (another tool's, or from before the registry): GC leaves each while its namespace lives",
			"network", network, "attachments", len(ids), "alloc_ids", ids[:min(len(ids), 10)])
	}
}

// networkReady is Status for one network. The default network's STATUS
// goes through Config.CNI, like its other commands.
func (p *prober) networkReady(ctx context.Context, conf catalog.Conf, isDefault bool) (err error) {
	ctx, op := p.tel.StartNetwork(ctx, telemetry.OpStatusNetwork, conf.Info.Name, "", "", "")
	defer func() { op.End(err) }()
	if err := p.plugins.Missing(conf); err != nil {
		return err
	}
	if err := p.plugins.CheckBackends(ctx, conf.List); err != nil {
		return err
	}
	if _, err := p.lib.ValidateNetworkList(ctx, conf.List); err != nil {
		return fmt.Errorf("network %q: %w", conf.Info.Name, err)
	}
	if isDefault {
		if err := p.cni.Status(); err != nil {
			return fmt.Errorf("network %q: CNI STATUS: %w", conf.Info.Name, err)
		}
	} else if err := p.lib.GetStatusNetworkList(ctx, conf.List); err != nil {
		return fmt.Errorf("network %q: CNI STATUS: %w", conf.Info.Name, err)
	}
	return nil
}

// statusOf is Status of the given networks only.
func (p *prober) statusOf(ctx context.Context, networks []string) (err error) {
	ctx, op := p.tel.StartOp(ctx, telemetry.OpStatus, "", "")
	defer func() { op.End(err) }()
	def, err := p.nets.Current()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	var problems []error
	for _, network := range networks {
		conf, err := p.nets.Known(network, false)
		if err != nil {
			return err
		}
		err = p.networkReady(ctx, conf, conf.Info.Name == def.Info.Name)
		p.tel.NoteReady(network, err)
		if err != nil {
			problems = append(problems, err)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %w", ErrNotReady, errs.Join(problems))
	}
	return nil
}
