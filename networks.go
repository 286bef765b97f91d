package cninet

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/hashicorp/go-hclog"
)

// networks is every network a Configurator knows: read from Config at
// New and again on Reload, the default one handed to go-cni on first use,
// and those a Reload dropped, which Teardown still needs.
type networks struct {
	logger      hclog.Logger
	cni         cni.CNI
	confDir     string
	networkName string
	explicit    []byte   // Config.ConfList
	extra       [][]byte // Config.ConfLists

	mu      sync.RWMutex           // guards the fields below
	conf    networkConf            // the default network's
	set     networkSet             // every known network, the default included
	retired map[string]networkConf // networks a Reload dropped: Teardown still needs them
	loaded  bool                   // go-cni has conf
	closed  bool
}

// newNetworks reads every network cfg names (see read).
func newNetworks(cfg Config, logger hclog.Logger) (*networks, error) {
	n := &networks{logger: logger, confDir: cfg.ConfDir, networkName: cfg.NetworkName, explicit: cfg.ConfList, extra: cfg.ConfLists}
	conf, set, err := n.read()
	if err != nil {
		return nil, err
	}
	n.conf, n.set = conf, set
	return n, nil
}

// networkSet is every network a Configurator knows, by name.
type networkSet struct {
	byName  map[string]networkConf
	skipped []error // ConfDir files that could not be read: a network asked for may be in one
}

func newNetworkSet() networkSet { return networkSet{byName: map[string]networkConf{}} }

// names returns the known network names, sorted.
func (r networkSet) names() []string {
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// confDirNetwork is one parseable network in ConfDir and the file it came from.
type confDirNetwork struct {
	file string
	list *libcni.NetworkConfigList
}

// read reads every network this Configurator knows: ConfList (the
// default network) or, without it, every network in ConfDir; then
// ConfLists, whose bytes win over a ConfDir network of the same name.
// The default network is ConfList's, else NetworkName, else the first
// network in ConfDir (in file order), else the first of ConfLists.
func (n *networks) read() (networkConf, networkSet, error) {
	reg := newNetworkSet()
	var def networkConf
	var dirNets []confDirNetwork
	switch {
	case len(n.explicit) > 0:
		conf, err := n.readConf(n.explicit)
		if err != nil {
			return networkConf{}, reg, err
		}
		def, reg.byName[conf.info.name] = conf, conf
	case n.confDir != "":
		var err error
		if dirNets, reg, err = n.readConfDir(); err != nil {
			return networkConf{}, reg, err
		}
	case len(n.extra) == 0:
		return networkConf{}, reg, fmt.Errorf("%w: set ConfList, ConfLists, or ConfDir (and NetworkName)", ErrInvalidConfig)
	}
	extra, err := n.readExtra(reg)
	if err != nil {
		return networkConf{}, reg, err
	}
	if def.list != nil {
		return def, reg, nil
	}
	def, err = n.pickDefault(reg, dirNets, extra)
	return def, reg, err
}

// readConfDir parses every conflist in ConfDir. The first file of a name
// wins, as with LoadConfList; unreadable files are skipped and logged,
// unless one may be the default network's own (then the error names it).
func (n *networks) readConfDir() ([]confDirNetwork, networkSet, error) {
	reg := newNetworkSet()
	if _, err := os.Stat(n.confDir); err != nil { // libcni takes a missing directory for an empty one
		return nil, reg, fmt.Errorf("%w: conflist directory: %w", ErrInvalidConfig, err)
	}
	files, err := libcni.ConfFiles(n.confDir, confExtensions)
	if err != nil {
		return nil, reg, fmt.Errorf("%w: reading conflist directory %s: %w", ErrInvalidConfig, n.confDir, err)
	}
	sort.Strings(files)
	var nets []confDirNetwork
	for _, file := range files {
		list, err := readConfFile(file)
		if err != nil {
			if n.networkName != "" && fileMayBe(file, n.networkName) && reg.byName[n.networkName].list == nil {
				return nil, reg, fmt.Errorf("%w: network %q: %s: %w", ErrInvalidConfig, n.networkName, file, err)
			}
			n.logger.Warn("skipped unreadable CNI config file", "file", file, "error", err)
			reg.skipped = append(reg.skipped, fmt.Errorf("%s: %w", file, err))
			continue
		}
		if _, dup := reg.byName[list.Name]; dup {
			continue
		}
		reg.byName[list.Name] = networkConf{bytes: list.Bytes, list: list, info: newNetworkInfo(list)}
		nets = append(nets, confDirNetwork{file: file, list: list})
	}
	return nets, reg, nil
}

// readExtra adds ConfLists to reg and returns their names in order.
func (n *networks) readExtra(reg networkSet) ([]string, error) {
	fromBytes := map[string]bool{}
	if len(n.explicit) > 0 {
		for name := range reg.byName {
			fromBytes[name] = true
		}
	}
	names := make([]string, 0, len(n.extra))
	for i, raw := range n.extra {
		list, err := parseConfList(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: ConfLists[%d]: %w", ErrInvalidConfig, i, err)
		}
		if fromBytes[list.Name] {
			return nil, fmt.Errorf("%w: ConfLists[%d]: network %q is given twice", ErrInvalidConfig, i, list.Name)
		}
		fromBytes[list.Name] = true
		reg.byName[list.Name] = networkConf{bytes: raw, list: list, info: newNetworkInfo(list)}
		names = append(names, list.Name)
	}
	return names, nil
}

// pickDefault chooses the default network when ConfList does not say.
func (n *networks) pickDefault(reg networkSet, dirNets []confDirNetwork, extra []string) (networkConf, error) {
	name := n.networkName
	switch {
	case name != "":
	case len(dirNets) > 0:
		name = dirNets[0].list.Name
	case len(extra) > 0:
		name = extra[0]
	default:
		err := fmt.Errorf("%w: no network in %s", ErrNetworkNotFound, n.confDir)
		if len(reg.skipped) > 0 {
			err = fmt.Errorf("%w; %d unreadable file(s) skipped: %w", err, len(reg.skipped), errors.Join(reg.skipped...))
		}
		return networkConf{}, err
	}
	if conf, ok := reg.byName[name]; ok {
		return conf, nil
	}
	return networkConf{}, notFoundError(n.confDir, name, reg.names(), reg.skipped)
}

// all returns every known network, the default first, then the others
// by name; withRetired adds those a Reload dropped.
func (n *networks) all(withRetired bool) []networkConf {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := []networkConf{n.conf}
	for _, name := range n.set.names() {
		if name != n.conf.info.name {
			out = append(out, n.set.byName[name])
		}
	}
	if withRetired {
		for _, conf := range n.retired {
			out = append(out, conf)
		}
	}
	return out
}

// names returns the names of every known network, sorted.
func (n *networks) names() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.set.names()
}

// Networks returns the names of every network this Configurator knows:
// the default network first, then the others sorted.
func (c *Configurator) Networks() []string {
	confs := c.nets.all(false)
	names := make([]string, len(confs))
	for i, conf := range confs {
		names[i] = conf.info.name
	}
	return names
}

// defaultConf returns the default network's conflist.
func (n *networks) defaultConf() networkConf {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.conf
}

// current returns the default network's conflist and makes sure go-cni
// has it: go-cni starts empty, and says so with ErrCNINotInitialized.
func (n *networks) current() (networkConf, error) {
	n.mu.RLock()
	conf, loaded, closed := n.conf, n.loaded, n.closed
	n.mu.RUnlock()
	if closed {
		return conf, fmt.Errorf("%w: network %q", ErrClosed, conf.info.name) // Teardown still cleans up with conf
	}
	if loaded {
		return conf, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.loaded {
		return n.conf, nil
	}
	if err := n.cni.Status(); err != nil && !cni.IsCNINotInitialized(err) {
		return networkConf{}, fmt.Errorf("%w: CNI STATUS: %w", ErrNotReady, err)
	} else if err != nil {
		if err := n.cni.Load(cni.WithConfListBytes(n.conf.bytes)); err != nil {
			return networkConf{}, fmt.Errorf("%w: loading conflist %q: %w", ErrInvalidConfig, n.conf.list.Name, err)
		}
	}
	n.loaded = true
	return n.conf, nil
}

// reload re-reads every network and hands the default one to go-cni;
// when either fails, the networks stay as they were.
func (n *networks) reload() error {
	conf, set, err := n.read()
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if err := n.cni.Load(cni.WithConfListBytes(conf.bytes)); err != nil {
		n.loaded = false // go-cni reset itself; load the last good one on next use
		return fmt.Errorf("%w: loading conflist %q: %w", ErrInvalidConfig, conf.info.name, err)
	}
	n.retire(set)
	n.conf, n.set, n.loaded = conf, set, true
	return nil
}

// retire keeps the networks a reload dropped, so that Teardown can still
// detach workloads that joined them.
func (n *networks) retire(next networkSet) {
	if n.retired == nil {
		n.retired = map[string]networkConf{}
	}
	for name, conf := range n.set.byName {
		if _, still := next.byName[name]; !still {
			n.retired[name] = conf
		}
	}
	for name := range next.byName {
		delete(n.retired, name)
	}
}

// close makes every later call but Teardown's fail with ErrClosed.
func (n *networks) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
}

// networkConf is one parsed conflist.
type networkConf struct {
	bytes []byte
	list  *libcni.NetworkConfigList
	info  networkInfo
}

// readConf parses the explicit conflist bytes of the default network.
func (n *networks) readConf(raw []byte) (networkConf, error) {
	list, err := parseConfList(raw)
	if err != nil {
		return networkConf{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if n.networkName != "" && list.Name != n.networkName {
		return networkConf{}, fmt.Errorf("%w: ConfList names network %q but NetworkName is %q", ErrInvalidConfig, list.Name, n.networkName)
	}
	return networkConf{bytes: raw, list: list, info: newNetworkInfo(list)}, nil
}

// known returns the conflist of a network this Configurator knows;
// forTeardown also accepts one that a Reload dropped, and a closed
// Configurator.
func (n *networks) known(name string, forTeardown bool) (networkConf, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed && !forTeardown {
		return networkConf{}, fmt.Errorf("%w: network %q", ErrClosed, name)
	}
	if conf, ok := n.set.byName[name]; ok {
		return conf, nil
	}
	if conf, ok := n.retired[name]; ok && forTeardown {
		return conf, nil
	}
	return networkConf{}, fmt.Errorf("%w: no network %q (known: %s)", ErrNetworkNotFound, name, strings.Join(n.set.names(), ", "))
}

// checkNetworkName rejects a network name no conflist can have.
func checkNetworkName(name string) error {
	if !networkNameRule.MatchString(name) {
		return fmt.Errorf("%w: network name %q does not match %s", ErrInvalidArgument, name, networkNameRule)
	}
	return nil
}

// NetworkName returns the name of the default network: the one an
// Allocation that names no network joins.
func (c *Configurator) NetworkName() string {
	return c.nets.defaultConf().info.name
}

// ConfList returns a copy of the default network's conflist bytes.
func (c *Configurator) ConfList() []byte {
	return append([]byte(nil), c.nets.defaultConf().bytes...)
}
