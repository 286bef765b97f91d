package catalog

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/errs"
)

// Sources are the Config fields that name the networks.
type Sources struct {
	ConfDir, NetworkName string
	ConfList             []byte   // the default network's conflist; ConfDir is then not read
	ConfLists            [][]byte // more networks
}

// Networks is every network a Configurator knows: read from its Sources
// at New and again on Reload, the default one handed to go-cni on first
// use, and those a Reload dropped, which Teardown still needs.
type Networks struct {
	logger hclog.Logger
	cni    cni.CNI
	src    Sources

	mu      sync.RWMutex    // guards the fields below
	conf    Conf            // the default network's
	set     set             // every known network, the default included
	retired map[string]Conf // networks a Reload dropped: Teardown still needs them
	loaded  bool            // go-cni has conf
	closed  bool
}

// NewNetworks reads every network src names (see read); the default one
// goes to go-cni (cni) on first use.
func NewNetworks(src Sources, logger hclog.Logger, cni cni.CNI) (*Networks, error) {
	n := &Networks{logger: logger, cni: cni, src: src}
	conf, set, err := n.read()
	if err != nil {
		return nil, err
	}
	n.conf, n.set = conf, set
	return n, nil
}

// ConfDir is the directory the networks are read from ("" when none).
func (n *Networks) ConfDir() string { return n.src.ConfDir }

// set is every network a Configurator knows, by name.
type set struct {
	byName  map[string]Conf
	skipped []error // ConfDir files that could not be read: a network asked for may be in one
}

func newSet() set { return set{byName: map[string]Conf{}} }

// names returns the known network names, sorted.
func (r set) names() []string {
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
func (n *Networks) read() (Conf, set, error) {
	reg := newSet()
	var def Conf
	var dirNets []confDirNetwork
	switch {
	case len(n.src.ConfList) > 0:
		conf, err := n.readConf(n.src.ConfList)
		if err != nil {
			return Conf{}, reg, err
		}
		def, reg.byName[conf.Info.Name] = conf, conf
	case n.src.ConfDir != "":
		var err error
		if dirNets, reg, err = n.readConfDir(); err != nil {
			return Conf{}, reg, err
		}
	case len(n.src.ConfLists) == 0:
		return Conf{}, reg, fmt.Errorf("%w: set ConfList, ConfLists, or ConfDir (and NetworkName)", errs.InvalidConfig)
	}
	extra, err := n.readExtra(reg)
	if err != nil {
		return Conf{}, reg, err
	}
	if def.List != nil {
		return def, reg, nil
	}
	def, err = n.pickDefault(reg, dirNets, extra)
	return def, reg, err
}

// readConfDir parses every conflist in ConfDir. The first file of a name
// wins, as with FindConfList; unreadable files are skipped and logged,
// unless one may be the default network's own (then the error names it).
func (n *Networks) readConfDir() ([]confDirNetwork, set, error) {
	reg := newSet()
	files, err := confFiles(n.src.ConfDir)
	if err != nil {
		return nil, reg, err
	}
	name := n.src.NetworkName
	var nets []confDirNetwork
	for _, file := range files {
		list, err := readConfFile(file)
		if err != nil {
			if name != "" && fileMayBe(file, name) && reg.byName[name].List == nil {
				return nil, reg, fmt.Errorf("%w: network %q: %s: %w", errs.InvalidConfig, name, file, err)
			}
			n.logger.Warn("skipped unreadable CNI config file", "file", file, "error", err)
			reg.skipped = append(reg.skipped, fmt.Errorf("%s: %w", file, err))
			continue
		}
		if _, dup := reg.byName[list.Name]; dup {
			continue
		}
		reg.byName[list.Name] = NewConf(list)
		nets = append(nets, confDirNetwork{file: file, list: list})
	}
	return nets, reg, nil
}

// readExtra adds ConfLists to reg and returns their names in order.
func (n *Networks) readExtra(reg set) ([]string, error) {
	fromBytes := map[string]bool{}
	if len(n.src.ConfList) > 0 {
		for name := range reg.byName {
			fromBytes[name] = true
		}
	}
	names := make([]string, 0, len(n.src.ConfLists))
	for i, raw := range n.src.ConfLists {
		conf, err := Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: ConfLists[%d]: %w", errs.InvalidConfig, i, err)
		}
		name := conf.Info.Name
		if fromBytes[name] {
			return nil, fmt.Errorf("%w: ConfLists[%d]: network %q is given twice", errs.InvalidConfig, i, name)
		}
		fromBytes[name] = true
		reg.byName[name] = conf
		names = append(names, name)
	}
	return names, nil
}

// pickDefault chooses the default network when ConfList does not say.
func (n *Networks) pickDefault(reg set, dirNets []confDirNetwork, extra []string) (Conf, error) {
	name := n.src.NetworkName
	switch {
	case name != "":
	case len(dirNets) > 0:
		name = dirNets[0].list.Name
	case len(extra) > 0:
		name = extra[0]
	default:
		return Conf{}, withSkipped(fmt.Errorf("%w: no network in %s", errs.NetworkNotFound, n.src.ConfDir), reg.skipped)
	}
	if conf, ok := reg.byName[name]; ok {
		return conf, nil
	}
	return Conf{}, notFoundError(n.src.ConfDir, name, reg.names(), reg.skipped)
}

// readConf parses the explicit conflist bytes of the default network.
func (n *Networks) readConf(raw []byte) (Conf, error) {
	conf, err := Parse(raw)
	if err != nil {
		return Conf{}, fmt.Errorf("%w: %w", errs.InvalidConfig, err)
	}
	if want := n.src.NetworkName; want != "" && conf.Info.Name != want {
		return Conf{}, fmt.Errorf("%w: ConfList names network %q but NetworkName is %q", errs.InvalidConfig, conf.Info.Name, want)
	}
	return conf, nil
}

// All returns every known network, the default first, then the others
// by name; withRetired adds those a Reload dropped.
func (n *Networks) All(withRetired bool) []Conf {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := []Conf{n.conf}
	for _, name := range n.set.names() {
		if name != n.conf.Info.Name {
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

// Names returns the names of every known network, sorted.
func (n *Networks) Names() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.set.names()
}

// Default returns the default network's conflist.
func (n *Networks) Default() Conf {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.conf
}

// Current returns the default network's conflist and makes sure go-cni
// has it: go-cni starts empty, and says so with ErrCNINotInitialized.
// After Close it returns the conflist with an errs.Closed error (Teardown
// still cleans up with it).
func (n *Networks) Current() (Conf, error) {
	n.mu.RLock()
	conf, loaded, closed := n.conf, n.loaded, n.closed
	n.mu.RUnlock()
	if closed {
		return conf, fmt.Errorf("%w: network %q", errs.Closed, conf.Info.Name)
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
		return Conf{}, fmt.Errorf("%w: CNI STATUS: %w", errs.NotReady, err)
	} else if err != nil {
		if err := n.cni.Load(cni.WithConfListBytes(n.conf.Bytes)); err != nil {
			return Conf{}, fmt.Errorf("%w: loading conflist %q: %w", errs.InvalidConfig, n.conf.List.Name, err)
		}
	}
	n.loaded = true
	return n.conf, nil
}

// Reload re-reads every network and hands the default one to go-cni;
// when either fails, the networks stay as they were.
func (n *Networks) Reload() error {
	conf, set, err := n.read()
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errs.Closed
	}
	if err := n.cni.Load(cni.WithConfListBytes(conf.Bytes)); err != nil {
		n.loaded = false // go-cni reset itself; load the last good one on next use
		return fmt.Errorf("%w: loading conflist %q: %w", errs.InvalidConfig, conf.Info.Name, err)
	}
	n.retire(set)
	n.conf, n.set, n.loaded = conf, set, true
	return nil
}

// retire keeps the networks a reload dropped, so that Teardown can still
// detach workloads that joined them. The map is a new one: a View holds
// the last one without the lock.
func (n *Networks) retire(next set) {
	retired := make(map[string]Conf, len(n.retired))
	for name, conf := range n.retired {
		if _, back := next.byName[name]; !back {
			retired[name] = conf
		}
	}
	for name, conf := range n.set.byName {
		if _, still := next.byName[name]; !still {
			retired[name] = conf
		}
	}
	n.retired = retired
}

// Close makes every later call but Teardown's fail with errs.Closed.
func (n *Networks) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
}

// Known returns the conflist of a network this Configurator knows;
// forTeardown also accepts one that a Reload dropped, and a closed
// Configurator.
func (n *Networks) Known(name string, forTeardown bool) (Conf, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed && !forTeardown {
		return Conf{}, fmt.Errorf("%w: network %q", errs.Closed, name)
	}
	if conf, ok := n.set.byName[name]; ok {
		return conf, nil
	}
	if conf, ok := n.retired[name]; ok && forTeardown {
		return conf, nil
	}
	return Conf{}, fmt.Errorf("%w: no network %q (known: %s)", errs.NetworkNotFound, name, strings.Join(n.set.names(), ", "))
}
