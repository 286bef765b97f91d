package cninet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/drift"
	"github.com/seed1280861d/cninet/internal/gc"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/nftables"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/repairwatch"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// Configurator attaches workloads' network namespaces to CNI networks and
// detaches them without leaks. It knows every network of its Config (see
// ConfDir and ConfLists); each Allocation names the networks it joins, or
// joins the default network. It is safe for concurrent use: calls for the
// same allocation ID are serialised, calls for different IDs run in
// parallel.
type Configurator struct {
	logger   hclog.Logger
	lib      *libcni.CNIConfig // VERSION, GC and validation, on the same dirs and cache as the verbs
	cacheDir string
	ifs      attachments.IfNaming
	retry    RetryPolicy // Config.Retry, its defaults applied

	// The parts the operations share.
	nets     *catalog.Networks     // every known network
	plugins  *catalog.Plugins      // the plugin binaries and the backends they use here
	registry *attachments.Registry // the host registry: records and the locks every process honours
	find     *attachments.Finder   // an allocation's attachments
	seams    *attachments.Seams    // how a cleanup reaches the host
	drivers  *attachments.Drivers  // how each network's plugins run
	requests requests              // Config.IgnorePortMappingHostIP's requests
	owners   attachments.Owners    // Config.Owner, or WithOwner's
	tel      *telemetry.Recorder

	// The operations, each holding only the parts it uses (wire).
	attacher  *attacher             // Setup, and Connect's attach
	detacher  *attachments.Detacher // Teardown, and every other detach
	connector *connector            // Connect, Disconnect
	checker   *checker              // Check, Drifts
	prober    *prober               // Status, Unrecorded
	collector *gc.Collector         // GC

	watcher   *watcher
	repairer  *repairwatch.Watcher // Config.RepairEvery's
	closeErr  error
	closeOnce sync.Once
}

// New validates cfg and returns a Configurator. The conflists are read and
// validated now (an unknown default network is ErrNetworkNotFound, a
// malformed conflist ErrInvalidConfig) but handed to go-cni only on first
// use.
func New(cfg Config) (*Configurator, error) {
	if err := cfg.Retry.validate(); err != nil {
		return nil, err
	}
	cfg = applyDefaults(cfg)
	if cfg.CNI == nil && filepath.Clean(cfg.CacheDir) != defaultCacheDir {
		return nil, fmt.Errorf("%w: CacheDir %q with the default go-cni, which always caches in %s (set Config.CNI too, or leave CacheDir empty)",
			ErrInvalidConfig, cfg.CacheDir, defaultCacheDir)
	}
	c := &Configurator{
		logger:   cfg.Logger,
		cacheDir: cfg.CacheDir,
		ifs:      attachments.IfNaming{Prefix: cfg.InterfacePrefix},
		retry:    cfg.Retry.withDefaults(),
		owners:   attachments.Owners{Configured: cfg.Owner},
		drivers:  &attachments.Drivers{},
	}
	store, err := registry.Open(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("%w: StateDir: %w", ErrInvalidConfig, err)
	}
	// An explicit exec: given none, libcni sets one lazily on first use,
	// unsynchronised, which races when workloads attach concurrently.
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	c.lib = libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, c.cacheDir, exec)
	c.drivers.Lib = attachments.LibDriver{Lib: c.lib, NoCache: libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, filepath.Join(c.cacheDir, "cninet", "no-cache"), exec),
		Exec: exec}
	if c.drivers.CNI = cfg.CNI; c.drivers.CNI == nil {
		c.drivers.FindPlugins = true
		if c.drivers.CNI, err = cni.New(cni.WithPluginDir(cfg.PluginDirs), cni.WithInterfacePrefix(cfg.InterfacePrefix)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	sources := catalog.Sources{ConfDir: cfg.ConfDir, NetworkName: cfg.NetworkName, ConfList: cfg.ConfList, ConfLists: cfg.ConfLists}
	if c.nets, err = catalog.NewNetworks(sources, c.logger, c.drivers.CNI); err != nil {
		return nil, err
	}
	if cfg.Watch && (len(cfg.ConfList) > 0 || cfg.ConfDir == "") {
		return nil, fmt.Errorf("%w: Watch needs ConfDir and no ConfList", ErrInvalidConfig)
	}
	ipt, nft := &iptables.Opener{Open: cfg.IPTables}, &nftables.Opener{Open: cfg.NFTables}
	c.plugins = catalog.NewPlugins(cfg.PluginDirs, c.lib, ipt, nft)
	c.registry = &attachments.Registry{Store: store, CacheDir: c.cacheDir, Logger: c.logger, Nets: c.nets, Plugins: c.plugins}
	c.find = &attachments.Finder{Nets: c.nets, Registry: c.registry, Lib: c.lib, CacheDir: c.cacheDir, Ifs: c.ifs, Logger: c.logger,
		InjectedCNI: !c.drivers.FindPlugins}
	c.seams = &attachments.Seams{IPTOpener: ipt, NFTOpener: nft, OpenLinks: cfg.Links, CacheDir: c.cacheDir, Ifs: c.ifs, Nets: c.nets, Plugins: c.plugins,
		Records: c.registry}
	c.requests = requests{ignoreHostIP: cfg.IgnorePortMappingHostIP, findPlugins: c.drivers.FindPlugins,
		libRuns: func() bool { return c.drivers.Lib.RunsPlugins() }}
	c.tel = newTelemetry(cfg, c.logger, c.nets)
	c.wire()
	if cfg.RepairEvery < 0 {
		c.tel.Close()
		return nil, fmt.Errorf("%w: RepairEvery %s: want a positive interval, or 0 for no repair watcher", ErrInvalidConfig, cfg.RepairEvery)
	}
	if cfg.Watch {
		if c.watcher, err = startWatcher(c.nets, c.logger, c.Reload); err != nil {
			c.tel.Close()
			return nil, err
		}
	}
	if cfg.RepairEvery > 0 {
		c.repairer = newRepairWatcher(cfg, c.owners.Configured, c.logger, c.checker)
		c.repairer.Start()
	}
	return c, nil
}

// wire builds the operations from c's parts, each given only those it
// uses. New calls it once its parts are built; a test that replaces a
// part (the logger, telemetry) calls it again.
func (c *Configurator) wire() {
	c.detacher = &attachments.Detacher{Owners: c.owners, Find: c.find, Registry: c.registry, Seams: c.seams, Drivers: c.drivers,
		Tel: c.tel, Logger: c.logger}
	c.attacher = &attacher{requests: c.requests, Owners: c.owners, find: c.find, registry: c.registry, plugins: c.plugins, drivers: c.drivers,
		tel: c.tel, logger: c.logger, retry: c.retry, detacher: c.detacher}
	c.connector = &connector{requests: c.requests, Owners: c.owners, registry: c.registry, nets: c.nets, find: c.find, lib: c.lib,
		cacheDir: c.cacheDir, ifs: c.ifs, tel: c.tel, logger: c.logger, attacher: c.attacher, detacher: c.detacher}
	c.checker = &checker{requests: c.requests, Owners: c.owners, registry: c.registry, nets: c.nets, plugins: c.plugins, find: c.find,
		seams: c.seams, drivers: c.drivers, cacheDir: c.cacheDir, tel: c.tel, logger: c.logger,
		lives:    &drift.LiveBuilder{Registry: c.registry, Plugins: c.plugins, Seams: c.seams, Lib: c.lib, FindPlugins: c.drivers.FindPlugins},
		repairer: &drift.Repairer{Plugins: c.plugins, Drivers: c.drivers, Tel: c.tel}}
	c.prober = &prober{cni: c.drivers.CNI, lib: c.lib, cacheDir: c.cacheDir, nets: c.nets, plugins: c.plugins, registry: c.registry,
		tel: c.tel, logger: c.logger}
	c.collector = &gc.Collector{Owners: c.owners, Registry: c.registry, Nets: c.nets, Find: c.find, Seams: c.seams, Lib: c.lib, Ifs: c.ifs,
		Tel: c.tel, Logger: c.logger, Detacher: c.detacher}
}

// Setup attaches the network namespace at netns to the networks the
// allocation names (Allocation.NetworkNames, in order, as <prefix>0,
// <prefix>1, …), or to the default network, and returns the workload's
// addresses. The networks attach concurrently, each with its own retry
// loop: a failed ADD is retried per the RetryPolicy with a DEL in between
// (host-local refuses a second ADD for the same id). Interface names and
// NetworkStatus.Networks follow the allocation's order whatever order the
// plugins finish in. Setup is all or nothing: when a network fails for
// good, or ctx is done, or a result has no usable address, the other
// networks' ADDs are cancelled, Setup waits for every one of them, and
// then detaches every network of the allocation (DEL and force cleanup,
// also of a network whose ADD was cut short) before it returns; the error
// joins one ErrSetupFailed error per network that failed, each naming its
// network. The rollback runs on a deadline of its own (30s), so Setup
// returns at most that long after ctx is done; what it could not remove
// (behind a held xtables lock, say) is named in the error, wrapped
// (ErrCleanupFailed, ErrXtablesLock), and a Teardown of the allocation
// finishes it. An unknown network is an ErrNetworkNotFound error before
// any plugin runs, and so is (ErrRecordUnreadable) a network whose record
// in the host registry this cninet cannot read (damaged, or a newer
// cninet's): the file is kept byte for byte, and the error names it.
func (c *Configurator) Setup(ctx context.Context, alloc *Allocation, netns string) (_ *NetworkStatus, err error) {
	return c.attacher.setup(ctx, alloc, netns)
}

// Teardown detaches the workload of alloc from every network it is
// attached to and removes whatever the plugins left: per network, DEL
// with the port mappings and args it was attached with, then, whatever
// the DEL returned, a force cleanup of the attachment's rules, chains,
// reservations and cached result, by the ownership rule.
//
//   - Pass the Allocation given to Setup. The networks Connect added, and
//     the attachments the host registry records for this owner, are
//     detached too (with their recorded conflist); another owner's are
//     left alone.
//   - It is idempotent: tearing down twice, or what was never set up,
//     returns nil. netns may be empty or already deleted.
//   - No DEL can take anything of another attachment, and a Teardown
//     killed at any point is finished by the next one, in any process.
//   - One network's failure does not stop the others; the error joins
//     each. An attachment whose registry file cannot be read is left
//     alone (ErrRecordUnreadable).
//
// What it detaches, in which order, and why it is safe: docs/design.md,
// "Teardown".
func (c *Configurator) Teardown(ctx context.Context, alloc *Allocation, netns string) (err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpTeardown, allocID(alloc), netns)
	defer func() { op.End(err) }()
	req, err := newRequest(alloc, c.requests.ignoreHostIP)
	if err != nil {
		return err
	}
	return c.detacher.Teardown(ctx, req, netns)
}

// Connect attaches the live workload of alloc to one more network, as
// Podman's `network connect` does, under the lowest interface name
// <prefix>N that none of its networks uses, and returns the new
// network's status (Interfaces holds it alone).
//
//   - Pass the Allocation given to Setup: its ports and args go to the
//     new network by Setup's rules.
//   - A network the workload is attached to already is an
//     ErrAlreadyAttached error naming its interface.
//   - The ADD is retried like Setup's; a Connect that fails leaves nothing
//     of the new network behind and the other networks untouched.
//   - Teardown, Check and GC cover the network from then on, whether or
//     not alloc names it.
//   - ConnectOptions.IfName picks the interface instead, for a runtime
//     that names its workloads' interfaces (cninet daemon); the network's
//     result may then hold no address. At most one ConnectOptions may be
//     given (ErrInvalidArgument).
//
// How the name is picked and what IfName changes: docs/design.md,
// "Connect and Disconnect".
func (c *Configurator) Connect(ctx context.Context, alloc *Allocation, network, netns string, opts ...ConnectOptions) (*NetworkStatus, error) {
	o, err := connectOptionsOf("Connect", opts)
	if err != nil {
		return nil, err
	}
	if o.IfName != "" {
		return c.connector.connectAs(ctx, alloc, network, netns, o)
	}
	return c.connector.connectNext(ctx, alloc, network, netns)
}

// Disconnect detaches the workload of alloc from one network, as Podman's
// `network disconnect` does: DEL with the port mappings and args the
// network was attached with, then Teardown's force cleanup. The other
// networks are untouched.
//
//   - The network may be one alloc names or one Connect added; alloc may
//     go on naming it afterwards.
//   - It is idempotent: a network the workload is not attached to returns
//     nil; one this Configurator does not know is ErrNetworkNotFound.
//     netns may be empty or already deleted.
//   - ConnectOptions.IfName detaches exactly that interface's attachment,
//     with what the host registry recorded for it: the operation for a
//     runtime's DEL. Another owner's attachment whose namespace still
//     lives is left alone, and nil returned.
//   - An attachment whose registry file cannot be read is left alone
//     (ErrRecordUnreadable). At most one ConnectOptions may be given
//     (ErrInvalidArgument).
//
// The rest: docs/design.md, "Connect and Disconnect".
func (c *Configurator) Disconnect(ctx context.Context, alloc *Allocation, network, netns string, opts ...ConnectOptions) error {
	o, err := connectOptionsOf("Disconnect", opts)
	if err != nil {
		return err
	}
	if o.IfName != "" {
		return c.connector.disconnectAs(ctx, alloc, network, netns, o)
	}
	return c.connector.disconnectNetwork(ctx, alloc, network, netns)
}

// Check tells whether a running workload's attachments are whole: every
// network of the Allocation (and those Connect added), each checked
// against what its plugins wrote — cninet's own knowledge of each
// plugin's footprint, read from the host registry's record — then by the
// plugins' own CHECK where that plugin release's CHECK is sound. One read
// of the host serves every attachment.
//
//   - nil: whole.
//   - ErrCheckFailed: something is missing (errors.As gives a *DriftError
//     naming each piece, per attachment), or a plugin's CHECK failed, or
//     the namespace is gone (wrapping ErrNoNetNS).
//   - ErrCheckUnsupported: nothing is missing, but a plugin's CHECK could
//     not run (disableCheck). It never hides what cninet's check sees.
//
// CheckOptions.Repair restores what is missing in place and returns nil
// once the attachments are whole again; what cannot be restored in place
// is an ErrNotRepairable error (re-create the workload). See
// docs/drift.md. CheckOptions.Network and IfName narrow it to one
// attachment, as a CNI runtime's CHECK names it. At most one
// CheckOptions may be given (ErrInvalidArgument).
func (c *Configurator) Check(ctx context.Context, alloc *Allocation, netns string, opts ...CheckOptions) error {
	o, err := optionsOf("Check", opts)
	if err != nil {
		return err
	}
	switch {
	case o.Network == "" && o.IfName == "":
		return c.checker.checkAll(ctx, alloc, netns, o.Repair)
	case o.Network == "" || o.IfName == "":
		return fmt.Errorf("%w: CheckOptions names network %q as interface %q: give both, or neither to check every network",
			ErrInvalidArgument, o.Network, o.IfName)
	}
	return c.checker.checkOne(ctx, alloc, o.Network, netns, o.IfName, o.Repair)
}

// Drifts checks, in one read of the host and changing nothing, every
// attachment the host registry records as attached, whoever its owner
// (ids narrow it to those containers'), and returns each one's Drift in
// the registry's order: nothing Missing when it is whole. Incomplete
// names what could not be read for it. Records that cannot be read are
// named in the error, which wraps ErrIO, after the drifts of those that
// could.
func (c *Configurator) Drifts(ctx context.Context, ids ...string) ([]Drift, error) {
	return c.checker.drifts(ctx, ids)
}

// Status reports whether this Configurator can attach workloads now, in
// every network it knows: the conflists are loaded, every plugin they name
// is in the plugin dirs and supports the conflist's cniVersion, a plugin
// asked for an nftables backend has one (ErrInvalidConfig naming the
// plugin otherwise), and the CNI 1.1 STATUS command (for conflists of that
// version) passes. The error (ErrNotReady, plus ErrPluginMissing when a
// plugin is absent) names each network that is not ready and what is
// wrong with it. Suitable for a node fingerprint.
//
// Given networks, Status checks only those: a network this Configurator
// does not know is then an ErrNetworkNotFound error.
//
// Status of every network also reports, in the log (Info, at most once a
// minute), the attachments libcni's cache holds in its networks that no
// record of the host registry claims (Unrecorded): another tool's, or
// from before the registry; GC leaves them while their namespace lives.
func (c *Configurator) Status(ctx context.Context, networks ...string) (err error) {
	if len(networks) > 0 {
		return c.prober.statusOf(ctx, networks)
	}
	return c.prober.status(ctx)
}

// Unrecorded lists the attachments of this Configurator's networks that
// no record claims, sorted by network, ID and interface. An unreadable
// cache or registry is an ErrIO error.
func (c *Configurator) Unrecorded() ([]UnrecordedAttachment, error) {
	return c.prober.unrecorded()
}

// GC brings the host back to what the live allocations need: every
// attachment of this Configurator's owner (Config.Owner), in every
// network it knows, whose allocation ID is not in liveAllocIDs is
// detached as Teardown detaches it; then a sweep removes, by the
// ownership rule, what no record or cache remembers any more (after a
// crash or a reboot).
//
//   - liveAllocIDs must not be nil; an empty slice means nothing is live.
//     An attachment is live when its allocation is, whatever its
//     interface, or when GCOptions.LiveAttachments names it.
//   - Never collected: another owner's attachments (but those recorded in
//     an earlier boot), allocations set up, checked or torn down while GC
//     runs, state no record claims whose namespace still lives, and the
//     ids of unreadable registry files (GCReport.Unreadable).
//   - Setups of other allocations run meanwhile; no ADD runs while the
//     plugins' GC command and the sweep do (the host's GC lock, waited
//     for until ctx is done: ErrBusy).
//   - GCOptions narrow it to some networks, name live attachments by
//     interface, or make it a dry run; at most one may be given
//     (ErrInvalidArgument). A network whose conflist sets disableGC is
//     skipped. One network's failure does not stop the others; the error
//     joins each.
//
// Its passes, its locks and what the sweep removes: docs/design.md, "GC".
func (c *Configurator) GC(ctx context.Context, liveAllocIDs []string, opts ...GCOptions) (*GCReport, error) {
	o, err := optionsOf("GC", opts)
	if err != nil {
		return nil, err
	}
	scope, err := gcScopeOf(o, c.nets)
	if err != nil {
		return nil, err
	}
	report, err := c.collector.Collect(ctx, liveAllocIDs, scope)
	return gcReportOf(report), err
}

// Reload re-reads every network from ConfDir (ConfList and ConfLists
// bytes stay as given, and still win) and hands the default network's
// conflist to go-cni. When the default network's file is missing or
// broken, or a conflist given as bytes is, everything stays as it was and
// the error says why; other broken files are skipped. A network that is
// gone from ConfDir can no longer be joined, but Teardown still detaches
// workloads that joined it. A Configurator without ConfDir has nothing to
// reload: that is an ErrInvalidConfig error.
func (c *Configurator) Reload() (err error) {
	_, op := c.tel.StartOp(context.Background(), telemetry.OpReload, "", "")
	defer func() { op.End(err) }()
	if c.nets.ConfDir() == "" {
		return fmt.Errorf("%w: no ConfDir to reload from", ErrInvalidConfig)
	}
	return c.nets.Reload()
}

// Attachments lists the host registry: every attachment any process on
// the host made through cninet with this StateDir, whoever its owner,
// sorted by id, network and interface. Given ids, it lists only those
// containers' attachments and reads only their records, so it is cheap
// enough for every request of a busy runtime. A file in the registry
// that is no usable record (corrupt, or of a newer cninet) is listed too,
// as an attachment in state "unreadable" (AttachmentRecord.Unreadable
// says why), and named in the error, which wraps ErrIO.
func (c *Configurator) Attachments(ids ...string) ([]AttachmentRecord, error) {
	return listAttachments(c.registry, ids)
}

// CachedResult returns the CNI result libcni cached when allocation id was
// attached to network as ifName (by Setup or Connect), in the
// network's CNI version: every interface, address, route and DNS setting
// the plugins reported. It is nil, with a nil error, when the cache holds
// none. A network this Configurator does not know is ErrNetworkNotFound.
func (c *Configurator) CachedResult(id, network, ifName string) (types.Result, error) {
	conf, err := c.nets.Known(network, true)
	if err != nil {
		return nil, err
	}
	res, err := c.lib.GetNetworkListCachedResult(conf.List, &libcni.RuntimeConf{ContainerID: id, IfName: ifName})
	if err != nil {
		return nil, fmt.Errorf("%w: cached result of allocation %s in network %q as %s: %w", ErrIO, id, network, ifName, err)
	}
	return res, nil
}

// CachedInterfaces lists the interfaces libcni's cache (Config.CacheDir)
// holds an attachment of container id under in network, sorted: what a
// runtime may have attached before the host registry recorded it. An
// unreadable cache is an ErrIO error; an id that is no CNI container id
// is an ErrInvalidAllocation error.
func (c *Configurator) CachedInterfaces(id, network string) ([]string, error) {
	if err := checkContainerID(id); err != nil {
		return nil, err
	}
	cached, err := c.lib.GetCachedAttachments(id)
	if err != nil {
		return nil, fmt.Errorf("%w: reading libcni's cache in %s: %w", ErrIO, c.cacheDir, err)
	}
	var out []string
	for _, a := range cached {
		if a.Network == network {
			out = append(out, a.IfName)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Networks returns the names of every network this Configurator knows:
// the default network first, then the others sorted.
func (c *Configurator) Networks() []string {
	confs := c.nets.All(false)
	names := make([]string, len(confs))
	for i, conf := range confs {
		names[i] = conf.Info.Name
	}
	return names
}

// NetworkName returns the name of the default network: the one an
// Allocation that names no network joins.
func (c *Configurator) NetworkName() string {
	return c.nets.Default().Info.Name
}

// ConfList returns a copy of the default network's conflist bytes.
func (c *Configurator) ConfList() []byte {
	return append([]byte(nil), c.nets.Default().Bytes...)
}

// Close stops the repair watcher (RepairEvery; a pass under way finishes
// first, and nothing repairs after Close returns) and watching ConfDir.
// Calls after Close fail with ErrClosed,
// except Teardown, which still cleans up. Close is idempotent and safe to
// call concurrently: every call returns the first one's result.
func (c *Configurator) Close() error {
	c.closeOnce.Do(func() {
		if c.repairer != nil {
			c.repairer.Stop()
		}
		c.nets.Close()
		c.seams.NFTOpener.Close() // the default's copy of the rules: its subscription to every nf_tables change
		c.tel.Close()
		if c.watcher != nil {
			if err := c.watcher.stop(); err != nil {
				c.closeErr = fmt.Errorf("%w: closing the ConfDir watcher: %w", ErrIO, err)
			}
		}
	})
	return c.closeErr
}
