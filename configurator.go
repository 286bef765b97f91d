package cninet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/hashicorp/go-hclog"
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
	// CNI drives the plugins. nil: go-cni built from PluginDirs and
	// InterfacePrefix. Tests inject fakes here.
	CNI cni.CNI
	// Watch reloads the conflist when ConfDir changes (ConfDir only).
	Watch bool
}

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
	tables       *tableCache
	cacheDir     string
	locks        keyedMutex
	gate         sync.RWMutex // shared by every call; GC takes it alone while CNI GC runs
	gc           gcGuard
	versions     pluginVersions

	findPlugins bool // cninet runs the plugins itself, from pluginDirs

	mu       sync.RWMutex // guards conf and loaded
	conf     loadedConf
	loaded   bool
	watcher  *watcher
	closed   bool
	closeErr error
}

// loadedConf is one parsed conflist.
type loadedConf struct {
	bytes []byte
	list  *libcni.NetworkConfigList
	info  networkInfo
}

const defaultPluginDir = "/opt/cni/bin"

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
		tables:       &tableCache{open: cfg.IPTables},
		cacheDir:     libcniCacheDir,
	}
	c.applyDefaults()
	conf, err := c.readConf(cfg.ConfList)
	if err != nil {
		return nil, err
	}
	c.conf = conf
	if c.cni = cfg.CNI; c.cni == nil {
		c.findPlugins = true
		if c.cni, err = cni.New(cni.WithPluginDir(c.pluginDirs), cni.WithInterfacePrefix(c.ifPrefix)); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
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
	if c.tables.open == nil {
		c.tables.open = newIPTables
	}
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
		return loadedConf{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
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
		return conf, ErrClosed // Teardown still cleans up with it
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
		return loadedConf{}, err
	} else if err != nil {
		if err := c.cni.Load(cni.WithConfListBytes(c.conf.bytes)); err != nil {
			return loadedConf{}, fmt.Errorf("%w: loading conflist %q: %v", ErrInvalidConfig, c.conf.list.Name, err)
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
		return nil, fmt.Errorf("%w: empty path for allocation %s", ErrInvalidNetNS, att.id)
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
func (c *Configurator) checkPlugins(conf loadedConf) error {
	if !c.findPlugins {
		return nil // an injected cni.CNI finds its plugins itself
	}
	return c.checkPluginsIn(conf)
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
// then, whatever DEL returned, the force cleanup of DESIGN.md (iptables and
// ip6tables rules and chains, IPAM reservations, the cached result). It is
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
	cl := c.newCleaner(conf)
	// Read the proof of the attachment's addresses before DEL erases it: a
	// DEL without a cached result cannot tell the firewall plugin which
	// address to clean, but host-local's reservation can tell us.
	cl.prior = cl.scanFiles([]string{att.id})
	removeErr := c.cni.Remove(ctx, att.id, netns, att.opts()...)
	delDone := time.Now()
	cleanErr := cl.cleanOne(att.id)
	if len(cl.removed) > 0 {
		items := make([]string, len(cl.removed))
		for i, it := range cl.removed {
			items[i] = it.Detail
		}
		c.logger.Warn("removed state the CNI plugins left behind", "alloc_id", att.id,
			"network", conf.info.name, "del_error", removeErr, "items", items)
	}
	c.logger.Debug("network detached", "alloc_id", att.id, "del", delDone.Sub(start), "cleanup", time.Since(delDone))
	if cleanErr != nil {
		if removeErr != nil {
			return fmt.Errorf("teardown of allocation %s: DEL: %v; %w", att.id, removeErr, cleanErr)
		}
		return fmt.Errorf("teardown of allocation %s: %w", att.id, cleanErr)
	}
	if removeErr != nil {
		c.logger.Warn("CNI DEL failed; force cleanup removed what was left", "alloc_id", att.id, "error", removeErr)
	}
	return nil
}

func (c *Configurator) newCleaner(conf loadedConf) *cleaner {
	return &cleaner{info: conf.info, ifName: c.ifName, cacheDir: c.cacheDir, tables: c.tables.get, batch: true}
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
