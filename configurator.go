package cninet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/links"
	"github.com/seed1280861d/cninet/internal/nftables"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/repairwatch"
	"github.com/seed1280861d/cninet/internal/telemetry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a Configurator. The zero value of each field selects
// the documented default; ConfList, ConfLists or ConfDir must give at
// least one network.
type Config struct {
	// Logger receives one line per Setup attempt and a warning for every
	// leaked item Teardown had to remove. nil: a null logger.
	Logger hclog.Logger
	// PluginDirs are searched for plugin binaries. nil:
	// filepath.SplitList($CNI_PATH), else /opt/cni/bin.
	PluginDirs []string
	// InterfacePrefix names the workload's interface (prefix + "0"). "": "eth".
	InterfacePrefix string
	// ConfDir holds the networks' conflists: every network in it is known
	// (the first file of a name wins, as with LoadConfList), and
	// NetworkName is the default network, the one an Allocation that names
	// no network joins. Without NetworkName the default is the first
	// network in ConfDir, in file order.
	ConfDir, NetworkName string
	// ConfList, when set, is the default network's conflist and wins over
	// ConfDir, which is then not read.
	ConfList []byte
	// ConfLists are more networks' conflists, known besides ConfList's or
	// ConfDir's; they win over a ConfDir network of the same name. Without
	// ConfList, ConfDir and NetworkName, the first is the default network.
	ConfLists [][]byte
	// IgnorePortMappingHostIP drops Port.HostIP from the port mappings.
	IgnorePortMappingHostIP bool
	// Retry says how Setup retries; the zero value is DefaultRetryPolicy.
	Retry RetryPolicy
	// IPTables opens iptables (ipv6 false) or ip6tables (ipv6 true) for
	// cleanup. nil: github.com/coreos/go-iptables.
	IPTables func(ipv6 bool) (host.IPTables, error)
	// NFTables opens nftables for cleanup, drift checks and repairs: the
	// plugins' nftables backends are cleaned whatever the conflist names.
	// nil: the host's, read and changed over netlink (rules deleted by
	// handle, listings decoded in-process; `nft -j` only where netlink
	// cannot list a table), repairs written as `nft -f` scripts; a host
	// without nft has no nftables rules, which is no error.
	NFTables func() (host.NFTables, error)
	// CNI drives the plugins. nil: go-cni built from PluginDirs and
	// InterfacePrefix. Tests inject fakes here.
	CNI cni.CNI
	// Watch reloads the conflist when ConfDir changes (ConfDir only).
	Watch bool
	// Links reaches the network devices of the host's namespace, where
	// the bandwidth plugin leaves an ifb device per attachment. nil: the
	// host's, over rtnetlink. Tests replace it.
	Links func() (host.Links, error)
	// CacheDir is libcni's cache directory, where results are cached per
	// attachment; GC, Teardown's cleanup and Status read it. "":
	// /var/lib/cni. go-cni always caches in /var/lib/cni, so another value
	// needs Config.CNI (a fake, or a CNI that caches there too).
	CacheDir string
	// StateDir is the host registry: one record per attachment, whose it
	// is and what its cleanup needs, and the locks every process on the
	// host honours. Every process that attaches workloads on the host
	// (orchestrators, cninet daemon, the CLI) must use the same one,
	// whatever its CacheDir: an absolute path (a relative one is
	// ErrInvalidConfig). "": /var/lib/cninet. Tests: a temp dir.
	StateDir string
	// Owner names whose attachments this Configurator makes: its GC
	// collects only its own owner's dead attachments (and state no record
	// claims once its namespace is gone), never another owner's live
	// ones; a DEL of one attachment (Disconnect with
	// ConnectOptions.IfName) of another owner's live attachment changes
	// nothing. "": the executable's base name.
	Owner string
	// TracerProvider receives a span per Setup, Teardown, Check, Status,
	// GC and Reload, with children per network, ADD attempt, DEL and
	// force cleanup (README, "Observability"). nil: the global provider
	// (otel.GetTracerProvider), which records nothing unless the program
	// installs one. go-cni's own spans (cni.Setup, cni.Remove, …) nest
	// under cninet's, but go-cni always uses the global provider: they
	// appear only when the global provider is set.
	TracerProvider trace.TracerProvider
	// RepairEvery, when positive, starts a watcher that keeps every live
	// attachment of Owner whole by itself: it checks them all at that
	// interval, and at once when the nf_tables ruleset changes (a
	// firewall reload, an `iptables -F`, `nft flush ruleset`), and
	// repairs what is missing as Check with CheckOptions.Repair does,
	// each attachment under its lock. Where every firewall change
	// arrives as an nf_tables change (iptables-nft, nft), the periodic
	// check reads the firewall only when one arrived since; files and
	// namespaces it reads every time. A drift that keeps coming back is
	// reported rather than fought. Close stops it. 0: no watcher (the
	// default). See docs/drift.md.
	RepairEvery time.Duration
	// RepairAnyOwner makes the watcher keep other owners' attachments
	// on this Configurator's networks whole too: cninet daemon, which
	// serves every CNI runtime as an owner of its own, sets it.
	RepairAnyOwner bool
	// MeterProvider receives cninet's metrics (cninet.operations,
	// cninet.cleanup.removed, …; README, "Observability"). nil: the
	// global provider (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider
}

// IPTables is the seam through which cleanup reads and deletes iptables
// rules (Config.IPTables opens one per IP family). go-iptables'
// *iptables.IPTables satisfies it unchanged; package host documents it
// and the optional extensions a faster implementation may add.
type IPTables = host.IPTables

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
	ifs      ifNaming
	retry    RetryPolicy // Config.Retry, its defaults applied

	// The parts the operations share.
	nets     *catalog.Networks // every known network
	plugins  *catalog.Plugins  // the plugin binaries and the backends they use here
	registry *hostRegistry     // the host registry: records and the locks every process honours
	find     *attachmentFinder // an allocation's attachments
	seams    *cleanerSeams     // how a cleanup reaches the host
	drivers  *drivers          // how each network's plugins run
	requests requests          // Config.IgnorePortMappingHostIP's requests
	owners   owners            // Config.Owner, or WithOwner's
	tel      *telemetry.Recorder

	// The operations, each holding only the parts it uses (wire).
	attacher  *attacher  // Setup, and Connect's attach
	detacher  *detacher  // Teardown, and every other detach
	connector *connector // Connect, Disconnect
	checker   *checker   // Check, Drifts
	prober    *prober    // Status, Unrecorded
	collector *collector // GC

	watcher   *watcher
	repairer  *repairwatch.Watcher // Config.RepairEvery's
	closeErr  error
	closeOnce sync.Once
}

const (
	defaultPluginDir = "/opt/cni/bin"
	// defaultCacheDir is where libcni, and so go-cni, caches results.
	defaultCacheDir = "/var/lib/cni"
)

// New validates cfg and returns a Configurator. The conflists are read and
// validated now (an unknown default network is ErrNetworkNotFound, a
// malformed conflist ErrInvalidConfig) but handed to go-cni only on first
// use.
func New(cfg Config) (*Configurator, error) {
	if err := cfg.Retry.validate(); err != nil {
		return nil, err
	}
	cfg = withDefaults(cfg)
	if cfg.CNI == nil && filepath.Clean(cfg.CacheDir) != defaultCacheDir {
		return nil, fmt.Errorf("%w: CacheDir %q with the default go-cni, which always caches in %s (set Config.CNI too, or leave CacheDir empty)",
			ErrInvalidConfig, cfg.CacheDir, defaultCacheDir)
	}
	c := &Configurator{
		logger:   cfg.Logger,
		cacheDir: cfg.CacheDir,
		ifs:      ifNaming{prefix: cfg.InterfacePrefix},
		retry:    cfg.Retry.withDefaults(),
		owners:   owners{owner: cfg.Owner},
		drivers:  &drivers{},
	}
	c.requests = requests{ignoreHostIP: cfg.IgnorePortMappingHostIP, drivers: c.drivers}
	store, err := registry.Open(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("%w: StateDir: %w", ErrInvalidConfig, err)
	}
	// An explicit exec: given none, libcni sets one lazily on first use,
	// unsynchronised, which races when workloads attach concurrently.
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	c.lib = libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, c.cacheDir, exec)
	c.drivers.driver = libDriver{lib: c.lib, noCache: libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, filepath.Join(c.cacheDir, "cninet", "no-cache"), exec),
		exec: exec}
	if c.drivers.cni = cfg.CNI; c.drivers.cni == nil {
		c.drivers.findPlugins = true
		if c.drivers.cni, err = cni.New(cni.WithPluginDir(cfg.PluginDirs), cni.WithInterfacePrefix(cfg.InterfacePrefix)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	sources := catalog.Sources{ConfDir: cfg.ConfDir, NetworkName: cfg.NetworkName, ConfList: cfg.ConfList, ConfLists: cfg.ConfLists}
	if c.nets, err = catalog.NewNetworks(sources, c.logger, c.drivers.cni); err != nil {
		return nil, err
	}
	if cfg.Watch && (len(cfg.ConfList) > 0 || cfg.ConfDir == "") {
		return nil, fmt.Errorf("%w: Watch needs ConfDir and no ConfList", ErrInvalidConfig)
	}
	ipt, nft := &iptables.Opener{Open: cfg.IPTables}, &nftables.Opener{Open: cfg.NFTables}
	c.plugins = catalog.NewPlugins(cfg.PluginDirs, c.lib, ipt, nft)
	c.registry = &hostRegistry{store: store, cacheDir: c.cacheDir, logger: c.logger, nets: c.nets, plugins: c.plugins}
	c.find = &attachmentFinder{nets: c.nets, registry: c.registry, lib: c.lib, cacheDir: c.cacheDir, ifs: c.ifs, logger: c.logger,
		injectedCNI: !c.drivers.findPlugins}
	c.seams = &cleanerSeams{iptOpener: ipt, nftOpener: nft, openLinks: cfg.Links, cacheDir: c.cacheDir, ifs: c.ifs, nets: c.nets, plugins: c.plugins,
		records: c.registry}
	c.tel = newTelemetry(cfg, c)
	c.wire()
	if cfg.RepairEvery < 0 {
		c.tel.Close()
		return nil, fmt.Errorf("%w: RepairEvery %s: want a positive interval, or 0 for no repair watcher", ErrInvalidConfig, cfg.RepairEvery)
	}
	if cfg.Watch {
		if c.watcher, err = startWatcher(c); err != nil {
			c.tel.Close()
			return nil, err
		}
	}
	if cfg.RepairEvery > 0 {
		c.repairer = newRepairWatcher(c, cfg)
		c.repairer.Start()
	}
	return c, nil
}

// wire builds the operations from c's parts, each given only those it
// uses. New calls it once its parts are built; a test that replaces a
// part (the logger, telemetry) calls it again.
func (c *Configurator) wire() {
	c.detacher = &detacher{registry: c.registry, seams: c.seams, drivers: c.drivers, tel: c.tel, logger: c.logger}
	c.attacher = &attacher{registry: c.registry, plugins: c.plugins, drivers: c.drivers, tel: c.tel, logger: c.logger, retry: c.retry,
		detacher: c.detacher}
	c.connector = &connector{requests: c.requests, owners: c.owners, registry: c.registry, nets: c.nets, find: c.find, lib: c.lib,
		cacheDir: c.cacheDir, ifs: c.ifs, tel: c.tel, logger: c.logger, attacher: c.attacher, detacher: c.detacher}
	c.checker = &checker{requests: c.requests, owners: c.owners, registry: c.registry, nets: c.nets, plugins: c.plugins, find: c.find,
		seams: c.seams, drivers: c.drivers, cacheDir: c.cacheDir, tel: c.tel, logger: c.logger,
		lives:    &liveBuilder{registry: c.registry, plugins: c.plugins, seams: c.seams, lib: c.lib, findPlugins: c.drivers.findPlugins},
		repairer: &repairer{plugins: c.plugins, drivers: c.drivers, tel: c.tel}}
	c.prober = &prober{cni: c.drivers.cni, lib: c.lib, cacheDir: c.cacheDir, nets: c.nets, plugins: c.plugins, registry: c.registry,
		tel: c.tel, logger: c.logger}
	c.collector = &collector{owners: c.owners, registry: c.registry, nets: c.nets, find: c.find, seams: c.seams, lib: c.lib, ifs: c.ifs,
		tel: c.tel, logger: c.logger, detacher: c.detacher}
}

// withDefaults is cfg with the documented default of every field left
// empty that has one New applies.
func withDefaults(cfg Config) Config {
	if cfg.Links == nil {
		cfg.Links = links.New
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.PluginDirs == nil {
		if env := os.Getenv("CNI_PATH"); env != "" {
			cfg.PluginDirs = filepath.SplitList(env)
		} else {
			cfg.PluginDirs = []string{defaultPluginDir}
		}
	}
	if cfg.InterfacePrefix == "" {
		cfg.InterfacePrefix = cni.DefaultPrefix
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = defaultCacheDir
	}
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	return cfg
}

// cleanerSeams is how a cleanup reaches the host (footprint.Seams), and
// what it must know about each network whose state may be there.
type cleanerSeams struct {
	iptOpener *iptables.Opener
	nftOpener *nftables.Opener
	openLinks func() (host.Links, error)
	cacheDir  string
	ifs       ifNaming
	nets      *catalog.Networks
	plugins   *catalog.Plugins
	records   footprint.RecordedHolders // the host registry
}

// network is what the cleaner must know about conf's network: its
// attachments have interface ifName, or any of ifNames.
func (s *cleanerSeams) network(conf catalog.Conf, ifName string, ifNames []string) footprint.Network {
	n := conf.Info.Footprint
	n.IfName, n.IfNames, n.CacheDir = ifName, ifNames, s.cacheDir
	n.HostportNFT = s.plugins.HostportNFT(conf)
	n.NoIPTables = !s.plugins.NeedsIPTables(conf)
	return n
}

// all is how the cleaner reaches the seams, with every network whose
// state may be there, those a Reload dropped included: another network's
// reservations and cached results say that an address is held.
func (s *cleanerSeams) all() footprint.Seams {
	known := s.nets.All(true)
	ifNames := s.ifs.all(len(known))
	nets := make([]footprint.Network, len(known))
	for i, conf := range known {
		nets[i] = s.network(conf, ifNames[0], ifNames)
	}
	return footprint.Seams{IPTables: s.iptOpener.Get, NFTables: s.nftOpener.Get, Links: s.openLinks, Networks: nets, Records: s.records}
}

// cleaner is a cleaner of the footprint of n's attachments (n as a
// detach's footprint.Leaving has it), its proofs kept in proofs (nil:
// none).
func (s *cleanerSeams) cleaner(ctx context.Context, n footprint.Network, proofs footprint.ProofStore) *footprint.Cleaner {
	seams := s.all()
	if proofs != nil {
		seams.Proofs = proofs
	}
	return footprint.NewCleaner(ctx, n, seams)
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
		c.tel.Close()
		if c.watcher != nil {
			if err := c.watcher.stop(); err != nil {
				c.closeErr = fmt.Errorf("%w: closing the ConfDir watcher: %w", ErrIO, err)
			}
		}
	})
	return c.closeErr
}
