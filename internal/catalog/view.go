package catalog

import (
	"fmt"
	"strings"

	"github.com/seed1280861d/cninet/internal/errs"
)

// View is the known networks at one instant, so that one operation
// resolves every network it names against the same ones.
type View struct {
	Default Conf // the default network's conflist
	Closed  bool // the Configurator was closed

	set     set
	retired map[string]Conf
}

// View returns the networks as they are now.
func (n *Networks) View() View {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return View{Default: n.conf, Closed: n.closed, set: n.set, retired: n.retired}
}

// Lookup returns the conflist of the network called name; forTeardown
// also finds one that a Reload dropped.
func (v View) Lookup(name string, forTeardown bool) (Conf, bool) {
	conf, ok := v.set.byName[name]
	if !ok && forTeardown {
		conf, ok = v.retired[name]
	}
	return conf, ok
}

// NotFound is the errs.NetworkNotFound error of an allocation that names
// networks nobody knows (quoted in unknown), listing the known ones.
func (v View) NotFound(allocID string, unknown []string) error {
	err := fmt.Errorf("%w: allocation %s: no network %s (known: %s)",
		errs.NetworkNotFound, allocID, strings.Join(unknown, ", "), strings.Join(v.set.names(), ", "))
	return withSkipped(err, v.set.skipped)
}
