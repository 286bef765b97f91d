package cninet

import (
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
	"github.com/seed1280861d/cninet/internal/admission"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/links"
	"github.com/seed1280861d/cninet/internal/nftables"
	"github.com/seed1280861d/cninet/internal/registry"
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
	// NFTables opens nftables for cleanup: the plugins' nftables backends
	// are cleaned whatever the conflist names. nil: the host's nft (listed
	// with `nft -j`, changed through sigs.k8s.io/knftables); a host without
	// nft has no nftables rules, which is no error.
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
	// whatever its CacheDir. "": /var/lib/cninet. Tests: a temp dir.
	StateDir string
	// Owner names whose attachments this Configurator makes: its GC
	// collects only its own owner's dead attachments (and state no record
	// claims), never another owner's. "": the executable's base name.
	Owner string
	// TracerProvider receives a span per Setup, Teardown, Check, Status,
	// GC and Reload, with children per network, ADD attempt, DEL and
	// force cleanup (README, "Observability"). nil: the global provider
	// (otel.GetTracerProvider), which records nothing unless the program
	// installs one. go-cni's own spans (cni.Setup, cni.Remove, …) nest
	// under cninet's, but go-cni always uses the global provider: they
	// appear only when the global provider is set.
	TracerProvider trace.TracerProvider
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
	logger       hclog.Logger
	cni          cni.CNI
	pluginDirs   []string
	ifPrefix     string
	ifName       string // the interface go-cni creates: ifPrefix + "0"
	confDir      string
	networkName  string
	ignoreHostIP bool
	retry        RetryPolicy
	iptOpener    *iptables.Opener
	nftOpener    *nftables.Opener
	cacheDir     string
	lib          *libcni.CNIConfig  // VERSION, GC and validation, on the same dirs and cache as the verbs
	driver       netDriver          // attaches what go-cni cannot: any network but the default as eth0
	explicit     []byte             // Config.ConfList
	extra        [][]byte           // Config.ConfLists
	adm          admission.Control  // per-allocation locks and the GC guard, in this process
	reg          *registry.Registry // the host registry: records and the locks every process honours
	owner        string
	firewall     hostFirewall // what the plugins find on this host: iptables, nftables
	openLinks    func() (host.Links, error)
	versions     pluginVersions
	tel          *telemetry

	findPlugins bool // the default go-cni: it runs the plugins from pluginDirs, which cninet can look for first

	pluginsMu sync.Mutex
	pluginsOK struct { // the last conflist whose plugins were all found
		list  *libcni.NetworkConfigList
		stamp []time.Time
	}
	pluginsOKByName map[string]pluginsFound // the same, per network

	mu        sync.RWMutex           // guards conf, nets, retired and loaded
	conf      networkConf            // the default network's
	nets      networkSet             // every known network, the default included
	retired   map[string]networkConf // networks a Reload dropped: Teardown still needs them
	loaded    bool
	watcher   *watcher
	closed    bool
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
	c := &Configurator{
		logger:       cfg.Logger,
		pluginDirs:   cfg.PluginDirs,
		ifPrefix:     cfg.InterfacePrefix,
		confDir:      cfg.ConfDir,
		networkName:  cfg.NetworkName,
		ignoreHostIP: cfg.IgnorePortMappingHostIP,
		retry:        cfg.Retry.withDefaults(),
		iptOpener:    &iptables.Opener{Open: cfg.IPTables},
		nftOpener:    &nftables.Opener{Open: cfg.NFTables},
		openLinks:    cfg.Links,
		cacheDir:     cfg.CacheDir,
		explicit:     cfg.ConfList,
		extra:        cfg.ConfLists,
	}
	if c.cacheDir == "" {
		c.cacheDir = defaultCacheDir
	} else if cfg.CNI == nil && filepath.Clean(c.cacheDir) != defaultCacheDir {
		return nil, fmt.Errorf("%w: CacheDir %q with the default go-cni, which always caches in %s (set Config.CNI too, or leave CacheDir empty)",
			ErrInvalidConfig, cfg.CacheDir, defaultCacheDir)
	}
	c.applyDefaults()
	stateDir := cfg.StateDir
	if stateDir == "" {
		stateDir = defaultStateDir
	}
	if c.owner = cfg.Owner; c.owner == "" {
		c.owner = defaultOwner()
	}
	var err error
	if c.reg, err = registry.Open(stateDir); err != nil {
		return nil, fmt.Errorf("%w: StateDir: %w", ErrInvalidConfig, err)
	}
	// An explicit exec: given none, libcni sets one lazily on first use,
	// unsynchronised, which races when workloads attach concurrently.
	c.lib = libcni.NewCNIConfigWithCacheDir(c.pluginDirs, c.cacheDir,
		&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}})
	c.driver = libDriver{lib: c.lib, noCache: libcni.NewCNIConfigWithCacheDir(c.pluginDirs, filepath.Join(c.cacheDir, "cninet", "no-cache"),
		&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}})}
	conf, nets, err := c.readNets()
	if err != nil {
		return nil, err
	}
	c.conf, c.nets = conf, nets
	if c.cni = cfg.CNI; c.cni == nil {
		c.findPlugins = true
		if c.cni, err = cni.New(cni.WithPluginDir(c.pluginDirs), cni.WithInterfacePrefix(c.ifPrefix)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	if cfg.Watch && (len(cfg.ConfList) > 0 || c.confDir == "") {
		return nil, fmt.Errorf("%w: Watch needs ConfDir and no ConfList", ErrInvalidConfig)
	}
	c.tel = newTelemetry(cfg, c)
	if cfg.Watch {
		if c.watcher, err = startWatcher(c); err != nil {
			c.tel.close()
			return nil, err
		}
	}
	return c, nil
}

func (c *Configurator) applyDefaults() {
	if c.openLinks == nil {
		c.openLinks = links.New
	}
	if c.logger == nil {
		c.logger = hclog.NewNullLogger()
	}
	if c.pluginDirs == nil {
		if env := os.Getenv("CNI_PATH"); env != "" {
			c.pluginDirs = filepath.SplitList(env)
		} else {
			c.pluginDirs = []string{defaultPluginDir}
		}
	}
	if c.ifPrefix == "" {
		c.ifPrefix = cni.DefaultPrefix
	}
	c.ifName = c.ifPrefix + "0" // go-cni's name for the first network's interface
}

// current returns the conflist in use and makes sure go-cni has it: go-cni
// starts empty, and says so with ErrCNINotInitialized.
func (c *Configurator) current() (networkConf, error) {
	c.mu.RLock()
	conf, loaded, closed := c.conf, c.loaded, c.closed
	c.mu.RUnlock()
	if closed {
		return conf, fmt.Errorf("%w: network %q", ErrClosed, conf.info.name) // Teardown still cleans up with conf
	}
	if loaded {
		return conf, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded {
		return c.conf, nil
	}
	if err := c.cni.Status(); err != nil && !cni.IsCNINotInitialized(err) {
		return networkConf{}, fmt.Errorf("%w: CNI STATUS: %w", ErrNotReady, err)
	} else if err != nil {
		if err := c.cni.Load(cni.WithConfListBytes(c.conf.bytes)); err != nil {
			return networkConf{}, fmt.Errorf("%w: loading conflist %q: %w", ErrInvalidConfig, c.conf.list.Name, err)
		}
	}
	c.loaded = true
	return c.conf, nil
}

// footprintNetwork is what the cleaner must know about conf's network:
// its attachments have interface ifName, or any of ifNames.
func (c *Configurator) footprintNetwork(conf networkConf, ifName string, ifNames []string) footprint.Network {
	n := conf.info.footprint
	n.IfName, n.IfNames, n.CacheDir = ifName, ifNames, c.cacheDir
	n.HostportNFT = c.hostportNFT(conf)
	n.NoIPTables = !c.needsIPTables(conf)
	return n
}

// seams is how the cleaner reaches the seams, with every network whose
// state may be there: another network's reservations and cached results
// say that an address is held.
func (c *Configurator) seams() footprint.Seams {
	known := c.knownNetworks()
	c.mu.RLock()
	for _, conf := range c.retired {
		known = append(known, conf)
	}
	c.mu.RUnlock()
	ifNames := c.ifNames(len(known))
	nets := make([]footprint.Network, len(known))
	for i, conf := range known {
		nets[i] = c.footprintNetwork(conf, ifNames[0], ifNames)
	}
	return footprint.Seams{IPTables: c.iptOpener.Get, NFTables: c.nftOpener.Get, Links: c.openLinks, Networks: nets}
}

// Close stops watching ConfDir. Calls after Close fail with ErrClosed,
// except Teardown, which still cleans up. Close is idempotent and safe to
// call concurrently: every call returns the first one's result.
func (c *Configurator) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		w := c.watcher
		c.mu.Unlock()
		c.tel.close()
		if w != nil {
			if err := w.stop(); err != nil {
				c.closeErr = fmt.Errorf("%w: closing the ConfDir watcher: %w", ErrIO, err)
			}
		}
	})
	return c.closeErr
}
