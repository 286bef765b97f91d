package cninet

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

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

// readNets reads every network this Configurator knows: ConfList (the
// default network) or, without it, every network in ConfDir; then
// ConfLists, whose bytes win over a ConfDir network of the same name.
// The default network is ConfList's, else NetworkName, else the first
// network in ConfDir (in file order), else the first of ConfLists.
func (c *Configurator) readNets() (networkConf, networkSet, error) {
	reg := newNetworkSet()
	var def networkConf
	var dirNets []confDirNetwork
	switch {
	case len(c.explicit) > 0:
		conf, err := c.readConf(c.explicit)
		if err != nil {
			return networkConf{}, reg, err
		}
		def, reg.byName[conf.info.name] = conf, conf
	case c.confDir != "":
		var err error
		if dirNets, reg, err = c.readConfDir(); err != nil {
			return networkConf{}, reg, err
		}
	case len(c.extra) == 0:
		return networkConf{}, reg, fmt.Errorf("%w: set ConfList, ConfLists, or ConfDir (and NetworkName)", ErrInvalidConfig)
	}
	extra, err := c.readExtra(reg)
	if err != nil {
		return networkConf{}, reg, err
	}
	if def.list != nil {
		return def, reg, nil
	}
	def, err = c.pickDefault(reg, dirNets, extra)
	return def, reg, err
}

// readConfDir parses every conflist in ConfDir. The first file of a name
// wins, as with LoadConfList; unreadable files are skipped and logged,
// unless one may be the default network's own (then the error names it).
func (c *Configurator) readConfDir() ([]confDirNetwork, networkSet, error) {
	reg := newNetworkSet()
	if _, err := os.Stat(c.confDir); err != nil { // libcni takes a missing directory for an empty one
		return nil, reg, fmt.Errorf("%w: conflist directory: %w", ErrInvalidConfig, err)
	}
	files, err := libcni.ConfFiles(c.confDir, confExtensions)
	if err != nil {
		return nil, reg, fmt.Errorf("%w: reading conflist directory %s: %w", ErrInvalidConfig, c.confDir, err)
	}
	sort.Strings(files)
	var nets []confDirNetwork
	for _, file := range files {
		list, err := readConfFile(file)
		if err != nil {
			if c.networkName != "" && fileMayBe(file, c.networkName) && reg.byName[c.networkName].list == nil {
				return nil, reg, fmt.Errorf("%w: network %q: %s: %w", ErrInvalidConfig, c.networkName, file, err)
			}
			c.logger.Warn("skipped unreadable CNI config file", "file", file, "error", err)
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
func (c *Configurator) readExtra(reg networkSet) ([]string, error) {
	fromBytes := map[string]bool{}
	if len(c.explicit) > 0 {
		for name := range reg.byName {
			fromBytes[name] = true
		}
	}
	names := make([]string, 0, len(c.extra))
	for i, raw := range c.extra {
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
func (c *Configurator) pickDefault(reg networkSet, dirNets []confDirNetwork, extra []string) (networkConf, error) {
	name := c.networkName
	switch {
	case name != "":
	case len(dirNets) > 0:
		name = dirNets[0].list.Name
	case len(extra) > 0:
		name = extra[0]
	default:
		err := fmt.Errorf("%w: no network in %s", ErrNetworkNotFound, c.confDir)
		if len(reg.skipped) > 0 {
			err = fmt.Errorf("%w; %d unreadable file(s) skipped: %w", err, len(reg.skipped), errors.Join(reg.skipped...))
		}
		return networkConf{}, err
	}
	if conf, ok := reg.byName[name]; ok {
		return conf, nil
	}
	return networkConf{}, notFoundError(c.confDir, name, reg.names(), reg.skipped)
}

// knownNetworks returns every known network, the default first, then the
// others by name.
func (c *Configurator) knownNetworks() []networkConf {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := []networkConf{c.conf}
	for _, name := range c.nets.names() {
		if name != c.conf.info.name {
			out = append(out, c.nets.byName[name])
		}
	}
	return out
}

// Networks returns the names of every network this Configurator knows:
// the default network first, then the others sorted.
func (c *Configurator) Networks() []string {
	confs := c.knownNetworks()
	names := make([]string, len(confs))
	for i, conf := range confs {
		names[i] = conf.info.name
	}
	return names
}

// retire keeps the networks a reload dropped, so that Teardown can still
// detach workloads that joined them.
func (c *Configurator) retire(next networkSet) {
	if c.retired == nil {
		c.retired = map[string]networkConf{}
	}
	for name, conf := range c.nets.byName {
		if _, still := next.byName[name]; !still {
			c.retired[name] = conf
		}
	}
	for name := range next.byName {
		delete(c.retired, name)
	}
}

// networkConf is one parsed conflist.
type networkConf struct {
	bytes []byte
	list  *libcni.NetworkConfigList
	info  networkInfo
}

// readConf parses the explicit conflist bytes of the default network.
func (c *Configurator) readConf(raw []byte) (networkConf, error) {
	list, err := parseConfList(raw)
	if err != nil {
		return networkConf{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.networkName != "" && list.Name != c.networkName {
		return networkConf{}, fmt.Errorf("%w: ConfList names network %q but NetworkName is %q", ErrInvalidConfig, list.Name, c.networkName)
	}
	return networkConf{bytes: raw, list: list, info: newNetworkInfo(list)}, nil
}

// knownConf returns the conflist of a network this Configurator knows;
// forTeardown also accepts one that a Reload dropped, and a closed
// Configurator.
func (c *Configurator) knownConf(name string, forTeardown bool) (networkConf, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed && !forTeardown {
		return networkConf{}, fmt.Errorf("%w: network %q", ErrClosed, name)
	}
	if conf, ok := c.nets.byName[name]; ok {
		return conf, nil
	}
	if conf, ok := c.retired[name]; ok && forTeardown {
		return conf, nil
	}
	return networkConf{}, fmt.Errorf("%w: no network %q (known: %s)", ErrNetworkNotFound, name, strings.Join(c.nets.names(), ", "))
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
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.conf.info.name
}

// ConfList returns a copy of the default network's conflist bytes.
func (c *Configurator) ConfList() []byte {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return append([]byte(nil), c.conf.bytes...)
}
