package cninet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// Config configures a Configurator. The zero value of each field selects
// the documented default; ConfList or ConfDir+NetworkName must say which
// network to use.
type Config struct {
	// Logger receives one line per Setup attempt and a warning for every
	// leaked item Teardown had to remove. nil: a null logger.
	Logger hclog.Logger
	// PluginDirs are searched for plugin binaries. nil:
	// filepath.SplitList($CNI_PATH), else /opt/cni/bin.
	PluginDirs []string
	// InterfacePrefix names the workload's interface (prefix + "0"). "": "eth".
	InterfacePrefix string
	// ConfDir and NetworkName select the conflist to load (LoadConfList) ...
	ConfDir, NetworkName string
	// ... unless ConfList is set: these conflist bytes win over ConfDir.
	ConfList []byte
	// IgnorePortMappingHostIP drops Port.HostIP from the port mappings.
	IgnorePortMappingHostIP bool
	// Retry says how Setup retries; the zero value is DefaultRetryPolicy.
	Retry RetryPolicy
	// IPTables opens iptables (ipv6 false) or ip6tables (ipv6 true) for
	// cleanup. nil: github.com/coreos/go-iptables.
	IPTables func(ipv6 bool) (IPTables, error)
	// NFTables opens nftables for cleanup: the plugins' nftables backends
	// are cleaned whatever the conflist names. nil: the host's nft (listed
	// with `nft -j`, changed through sigs.k8s.io/knftables); a host without
	// nft has no nftables rules, which is no error.
	NFTables func() (NFTables, error)
	// CNI drives the plugins. nil: go-cni built from PluginDirs and
	// InterfacePrefix. Tests inject fakes here.
	CNI cni.CNI
	// Watch reloads the conflist when ConfDir changes (ConfDir only).
	Watch bool
	// CacheDir is libcni's cache directory, where results are cached per
	// attachment; GC, Teardown's cleanup and Status read it. "":
	// /var/lib/cni. go-cni always caches in /var/lib/cni, so another value
	// needs Config.CNI (a fake, or a CNI that caches there too).
	CacheDir string
}

// IPTables is the subset of *iptables.IPTables (github.com/coreos/go-iptables)
// that cleanup uses; *iptables.IPTables satisfies it unchanged. Tests
// replace it with a fake through Config.IPTables. An implementation may
// also offer TableLister, Saver and Restorer: GC's sweep uses them to list
// and change whole tables in one process.
type IPTables = footprint.IPTables

// TableLister is an optional extension of IPTables: list a whole table in
// one command (`iptables -t table -S`).
type TableLister = footprint.TableLister

// Saver is an optional extension of IPTables: list every table in one
// command (iptables-save), each table's lines in `iptables -S` form.
type Saver = footprint.Saver

// Restorer is an optional extension of IPTables: apply many changes to one
// table in one `iptables-restore --noflush` transaction, falling back to
// one Delete per rule when the batch is refused.
type Restorer = footprint.Restorer

// NFTables is how cleanup reads and changes the tables the plugins'
// nftables backends write (inet cni_plugins_masquerade, ip and ip6
// cni_hostport). Tests replace it through Config.NFTables.
type NFTables = footprint.NFTables

// NFTable names one nftables table.
type NFTable = footprint.NFTable

// NFTRule is one nftables rule as cleanup sees it: where it is, its
// comment, and the addresses it matches on or translates to.
type NFTRule = footprint.NFTRule

// Configurator attaches workloads' network namespaces to one CNI network
// and detaches them without leaks. It is safe for concurrent use: calls for
// the same allocation ID are serialised, calls for different IDs run in
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
	tables       *footprint.Tables
	nftables     *footprint.NFTablesHandle
	cacheDir     string
	lib          *libcni.CNIConfig // VERSION, GC and validation, on the same dirs and cache as the verbs
	locks        keyedMutex
	gate         sync.RWMutex // shared by every call; GC takes it alone while CNI GC runs
	gc           gcGuard
	versions     pluginVersions

	findPlugins bool // cninet runs the plugins itself, from pluginDirs

	pluginsMu sync.Mutex
	pluginsOK struct { // the last conflist whose plugins were all found
		list  *libcni.NetworkConfigList
		stamp []time.Time
	}

	mu        sync.RWMutex // guards conf and loaded
	conf      loadedConf
	loaded    bool
	watcher   *watcher
	closed    bool
	closeErr  error
	closeOnce sync.Once
}

// loadedConf is one parsed conflist.
type loadedConf struct {
	bytes []byte
	list  *libcni.NetworkConfigList
	info  networkInfo
}

const (
	defaultPluginDir = "/opt/cni/bin"
	// defaultCacheDir is where libcni, and so go-cni, caches results.
	defaultCacheDir = "/var/lib/cni"
)

// New validates cfg and returns a Configurator. The conflist is read and
// validated now (an unknown network is ErrNetworkNotFound, a malformed one
// ErrInvalidConfig) but handed to go-cni only on first use.
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
		tables:       &footprint.Tables{Open: cfg.IPTables},
		nftables:     &footprint.NFTablesHandle{Open: cfg.NFTables},
		cacheDir:     cfg.CacheDir,
	}
	if c.cacheDir == "" {
		c.cacheDir = defaultCacheDir
	} else if cfg.CNI == nil && filepath.Clean(c.cacheDir) != defaultCacheDir {
		return nil, fmt.Errorf("%w: CacheDir %q with the default go-cni, which always caches in %s (set Config.CNI too, or leave CacheDir empty)",
			ErrInvalidConfig, cfg.CacheDir, defaultCacheDir)
	}
	c.applyDefaults()
	c.lib = libcni.NewCNIConfigWithCacheDir(c.pluginDirs, c.cacheDir, nil)
	conf, err := c.readConf(cfg.ConfList)
	if err != nil {
		return nil, err
	}
	c.conf = conf
	if c.cni = cfg.CNI; c.cni == nil {
		c.findPlugins = true
		if c.cni, err = cni.New(cni.WithPluginDir(c.pluginDirs), cni.WithInterfacePrefix(c.ifPrefix)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	if cfg.Watch {
		if len(cfg.ConfList) > 0 || c.confDir == "" {
			return nil, fmt.Errorf("%w: Watch needs ConfDir and no ConfList", ErrInvalidConfig)
		}
		if c.watcher, err = startWatcher(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Configurator) applyDefaults() {
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

// readConf parses explicit conflist bytes, else loads c.networkName from
// c.confDir.
func (c *Configurator) readConf(explicit []byte) (loadedConf, error) {
	raw := explicit
	if len(raw) == 0 {
		if c.confDir == "" || c.networkName == "" {
			return loadedConf{}, fmt.Errorf("%w: set ConfList, or ConfDir and NetworkName", ErrInvalidConfig)
		}
		var skipped []error
		var err error
		raw, skipped, err = findConfList(c.confDir, c.networkName)
		for _, s := range skipped {
			c.logger.Warn("skipped unreadable CNI config file", "error", s)
		}
		if err != nil {
			return loadedConf{}, err
		}
	}
	list, err := parseConfList(raw)
	if err != nil {
		return loadedConf{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.networkName != "" && len(explicit) > 0 && list.Name != c.networkName {
		return loadedConf{}, fmt.Errorf("%w: ConfList names network %q but NetworkName is %q", ErrInvalidConfig, list.Name, c.networkName)
	}
	return loadedConf{bytes: raw, list: list, info: newNetworkInfo(list)}, nil
}

// current returns the conflist in use and makes sure go-cni has it: go-cni
// starts empty, and says so with ErrCNINotInitialized.
func (c *Configurator) current() (loadedConf, error) {
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
		return loadedConf{}, fmt.Errorf("%w: CNI STATUS: %w", ErrNotReady, err)
	} else if err != nil {
		if err := c.cni.Load(cni.WithConfListBytes(c.conf.bytes)); err != nil {
			return loadedConf{}, fmt.Errorf("%w: loading conflist %q: %w", ErrInvalidConfig, c.conf.list.Name, err)
		}
	}
	c.loaded = true
	return c.conf, nil
}

// Setup attaches the network namespace at netns to the network and returns
// the workload's address. A failed ADD is retried per the RetryPolicy with
// a DEL in between (host-local refuses a second ADD for the same id); after
// the last failure, or when ctx is done, or when the result has no usable
// address, the attachment is torn down again before Setup returns, so a
// failed Setup leaves nothing behind.
func (c *Configurator) Setup(ctx context.Context, alloc *Allocation, netns string) (*NetworkStatus, error) {
	att, err := newAttachment(alloc, c.ignoreHostIP)
	if err != nil {
		return nil, err
	}
	if netns == "" {
		return nil, fmt.Errorf("%w: empty network namespace path for allocation %s", ErrInvalidArgument, att.id)
	}
	defer c.enter(att.id)()
	conf, err := c.current()
	if err != nil {
		return nil, err
	}
	if err := c.checkPlugins(conf); err != nil {
		return nil, err
	}
	res, err := c.addWithRetry(ctx, att, netns, conf)
	if err != nil {
		c.rollback(att, netns, conf)
		return nil, err
	}
	status, err := StatusFromResult(res)
	if err != nil {
		c.rollback(att, netns, conf)
		return nil, fmt.Errorf("setup of allocation %s: %w", att.id, err)
	}
	return status, nil
}

// checkPlugins fails Setup before anything runs when a plugin binary is
// missing: a chain that fails halfway through leaves a veth until the
// namespace goes, and a DEL cannot run a plugin that is not there either.
// The answer is kept until the conflist or a plugin directory changes.
func (c *Configurator) checkPlugins(conf loadedConf) error {
	if !c.findPlugins {
		return nil // an injected cni.CNI finds its plugins itself
	}
	stamp := c.pluginDirsStamp()
	c.pluginsMu.Lock()
	defer c.pluginsMu.Unlock()
	if c.pluginsOK.list == conf.list && slices.Equal(c.pluginsOK.stamp, stamp) {
		return nil
	}
	if err := c.checkPluginsIn(conf); err != nil {
		return err
	}
	c.pluginsOK.list, c.pluginsOK.stamp = conf.list, stamp
	return nil
}

// pluginDirsStamp is the modification times of the plugin directories: a
// binary added, removed or renamed changes its directory's.
func (c *Configurator) pluginDirsStamp() []time.Time {
	stamp := make([]time.Time, len(c.pluginDirs))
	for i, dir := range c.pluginDirs {
		if fi, err := os.Stat(dir); err == nil {
			stamp[i] = fi.ModTime()
		}
	}
	return stamp
}

// checkPluginsIn reports the plugins of conf missing from the plugin dirs.
func (c *Configurator) checkPluginsIn(conf loadedConf) error {
	var missing []string
	for _, t := range conf.info.pluginTypes {
		if _, err := invoke.FindInPath(t, c.pluginDirs); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found in %s", ErrPluginMissing, strings.Join(missing, ", "), strings.Join(c.pluginDirs, ":"))
	}
	return nil
}

// rollback removes a half-built attachment. It runs on its own deadline:
// the caller's context may be the very reason Setup failed.
func (c *Configurator) rollback(att attachment, netns string, conf loadedConf) {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	if err := c.detach(ctx, att, netns, conf); err != nil {
		c.logger.Error("rollback of failed setup incomplete", "alloc_id", att.id, "error", err)
	}
}

const rollbackTimeout = 30 * time.Second

// Teardown detaches the namespace and removes whatever the plugins left
// for this allocation: DEL with the same port mappings and args as Setup,
// then, whatever DEL returned, a force cleanup of everything the plugins
// are known to leave (iptables and ip6tables rules and chains, IPAM
// reservations, the cached result), by the ownership rule of
// internal/footprint. Its cost follows what one attachment can own, not
// the size of the host's ruleset. It is
// idempotent: tearing down twice, or tearing down what was never set up,
// returns nil. netns may be empty or already deleted.
func (c *Configurator) Teardown(ctx context.Context, alloc *Allocation, netns string) error {
	att, err := newAttachment(alloc, c.ignoreHostIP)
	if err != nil {
		return err
	}
	defer c.enter(att.id)()
	conf, err := c.current()
	if err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	return c.detach(ctx, att, netns, conf)
}

// detach is DEL plus force cleanup. A failed DEL is only logged when the
// cleanup then removed everything: what matters is that nothing is left.
func (c *Configurator) detach(ctx context.Context, att attachment, netns string, conf loadedConf) error {
	start := time.Now()
	cl := footprint.NewCleaner(ctx, c.footprintNetwork(conf), c.host())
	cl.Remember([]string{att.id}) // DEL erases the proof of the attachment's addresses
	removeErr := c.cni.Remove(ctx, att.id, netns, att.opts()...)
	delDone := time.Now()
	removed, cleanErr := cl.Clean([]string{att.id})
	if len(removed) > 0 {
		items := make([]string, len(removed))
		for i, it := range removed {
			items[i] = it.Detail
		}
		c.logger.Warn("removed state the CNI plugins left behind", "alloc_id", att.id,
			"network", conf.info.name, "del_error", removeErr, "items", items)
	}
	c.logRestored(cl.Restored(), att.id)
	c.logger.Debug("network detached", "alloc_id", att.id, "del", delDone.Sub(start), "cleanup", time.Since(delDone))
	if cleanErr != nil {
		cleanErr = fmt.Errorf("%w in network %q: %w", ErrCleanupFailed, conf.info.name, cleanErr)
		if removeErr != nil {
			return fmt.Errorf("teardown of allocation %s: DEL: %w; %w", att.id, removeErr, cleanErr)
		}
		return fmt.Errorf("teardown of allocation %s: %w", att.id, cleanErr)
	}
	if removeErr != nil {
		c.logger.Warn("CNI DEL failed; force cleanup removed what was left", "alloc_id", att.id, "error", removeErr)
	}
	return nil
}

// logRestored reports the port mappings of other attachments that a DEL
// (or libcni's GC) removed and cleanup added back.
func (c *Configurator) logRestored(items []footprint.Item, why string) {
	if len(items) == 0 {
		return
	}
	details := make([]string, len(items))
	for i, it := range items {
		details[i] = it.Detail
	}
	c.logger.Warn("added back other attachments' port mappings that a DEL of the same container id removed",
		"after", why, "items", details)
}

// footprintNetwork is what the cleaner must know about conf's network.
func (c *Configurator) footprintNetwork(conf loadedConf) footprint.Network {
	return footprint.Network{Name: conf.info.name, IfName: c.ifName, IPAMDirs: conf.info.ipamDirs, CacheDir: c.cacheDir,
		HostportNFT: conf.info.hostportNFT}
}

func (c *Configurator) host() footprint.Host {
	return footprint.Host{IPTables: c.tables.Get, NFTables: c.nftables.Get}
}

// enter serialises calls for one allocation and lets a running GC know
// the allocation is busy.
func (c *Configurator) enter(id string) (leave func()) {
	c.gate.RLock()
	unlock := c.locks.lock(id)
	c.gc.note(id)
	return func() {
		unlock()
		c.gate.RUnlock()
	}
}

// NetworkName returns the name of the CNI network in use.
func (c *Configurator) NetworkName() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.conf.info.name
}

// ConfList returns a copy of the conflist bytes in use.
func (c *Configurator) ConfList() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]byte(nil), c.conf.bytes...)
}

// keyedMutex serialises work per key without a global lock.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyedEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
