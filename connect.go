package cninet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// Connect attaches the live workload of alloc to one more network, as
// Podman's `network connect` does: network (which this Configurator must
// know) gets the lowest interface name <prefix>N that none of the
// workload's networks uses — the ones alloc names, at their places, and
// the ones libcni's cache knows it attached, Connect's included. Pass the
// workload's Allocation as given to Setup: its ports and args go to the
// new network by the same rules as Setup's (port mappings where the
// conflist declares the capability, args everywhere), and its
// NetworkNames say what the workload joined at Setup (a network
// disconnected since may stay named: libcni's cache tells). Connecting a
// network the workload is already attached to is an ErrAlreadyAttached
// error naming its interface. The ADD is retried like Setup's, and a Connect that fails
// leaves nothing of the new network behind (DEL and force cleanup) and the
// other networks untouched. The returned status is the new network's
// (Networks holds it alone). A connected network is always attached
// through libcni. Teardown, Check and GC cover it from then on, whether or
// not the caller's Allocation names it.
func (c *Configurator) Connect(ctx context.Context, alloc *Allocation, network, netns string) (_ *NetworkStatus, err error) {
	ctx, op := c.tel.startOp(ctx, opConnect, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := c.requestIn(alloc, netns)
	if err != nil {
		return nil, err
	}
	if err := checkNetworkName(network); err != nil {
		return nil, err
	}
	defer c.adm.Enter(req.id)()
	conf, err := c.knownConf(network, false)
	if err != nil {
		return nil, fmt.Errorf("%w (connecting allocation %s)", err, req.id)
	}
	found, err := c.attachmentsOf(alloc, req, false)
	if err != nil {
		return nil, err
	}
	var used []string
	for _, fa := range c.attached(found) {
		used = append(used, fa.att.ifName)
		if fa.att.name() == network {
			return nil, fmt.Errorf("%w: allocation %s is attached to network %q as %s", ErrAlreadyAttached, req.id, network, fa.att.ifName)
		}
	}
	att := attachment{conf: conf, ifName: c.freeIfName(used)}
	if err := c.preflight(att); err != nil {
		return nil, err
	}
	defer c.keepLoopback(req.id, netns, []foundAttachment{{att: att}})()
	return c.attachAll(ctx, req, netns, []attachment{att}, len(used) > 0)
}

// Disconnect detaches the workload of alloc from one network and leaves
// its other networks untouched, as Podman's `network disconnect` does:
// DEL with the port mappings and args the network was attached with, then
// the same force cleanup as Teardown's, so netns may be empty or already
// deleted. The network may be one alloc names or one added by Connect.
// Disconnecting a network the workload is not attached to returns nil,
// as Teardown does for what was never set up (when libcni's cache knows
// the workload, a network it does not know is not attached, and nothing
// runs); a network this
// Configurator does not know at all is an ErrNetworkNotFound error.
// The Allocation may go on naming a disconnected network: Check skips
// it, Connect attaches it again, Teardown finds nothing of it.
func (c *Configurator) Disconnect(ctx context.Context, alloc *Allocation, network, netns string) (err error) {
	ctx, op := c.tel.startOp(ctx, opDisconnect, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := newRequest(alloc, c.ignoreHostIP)
	if err != nil {
		return err
	}
	if err := checkNetworkName(network); err != nil {
		return err
	}
	defer c.adm.Enter(req.id)()
	if _, err := c.knownConf(network, true); err != nil {
		return fmt.Errorf("%w (disconnecting allocation %s)", err, req.id)
	}
	found, err := c.attachmentsOf(alloc, req, true)
	if err != nil {
		return err
	}
	attached := c.attached(found)
	found = slices.DeleteFunc(slices.Clone(attached), func(fa foundAttachment) bool { return fa.att.name() != network })
	if len(found) == 0 {
		c.logger.Debug("disconnect: not attached", "alloc_id", req.id, "network", network)
		return nil
	}
	defer c.keepLoopback(req.id, netns, found)()
	return c.detachAll(ctx, netns, found, len(attached) > len(found))
}

// keepLoopback, when members run the loopback plugin, notes whether the
// workload's lo is up and returns a func that brings it up again if a DEL
// took it down meanwhile: the loopback plugin's DEL sets lo down, which
// is right when the workload goes, wrong when it loses one network of
// several (a Disconnect, a Connect rolled back).
func (c *Configurator) keepLoopback(id, netns string, found []foundAttachment) (restore func()) {
	runsLoopback := slices.ContainsFunc(found, func(fa foundAttachment) bool { return slices.Contains(fa.att.conf.info.pluginTypes, "loopback") })
	if !runsLoopback || !loopbackUp(netns) {
		return func() {}
	}
	return func() {
		if loopbackUp(netns) {
			return
		}
		if err := setLoopbackUp(netns); err != nil {
			c.logger.Warn("could not bring the workload's loopback interface up again after a DEL of the loopback plugin",
				"alloc_id", id, "netns", netns, "error", err)
		}
	}
}

// foundAttachment is one network an allocation is attached to and what its
// plugins are told.
type foundAttachment struct {
	att    attachment
	req    request
	cached bool // libcni's cache knows the attachment
}

// attached drops from an allocation's members the networks the
// allocation names that are not attached any more: when libcni's cache
// knows the workload, a network it does not know was disconnected, or its
// Connect failed and was rolled back. (Teardown keeps them: a DEL of what
// is gone is harmless there, and an ADD cut short is never cached.) A
// network attached through an injected Config.CNI, whose cache cninet may
// not see, is taken at its word.
func (c *Configurator) attached(all []foundAttachment) []foundAttachment {
	if !slices.ContainsFunc(all, func(fa foundAttachment) bool { return fa.cached }) {
		return all
	}
	return slices.DeleteFunc(all, func(fa foundAttachment) bool { return !fa.cached && !(fa.att.viaCNI && !c.findPlugins) })
}

// attachmentsOf returns every network alloc is attached to: the networks it
// names, in its order, then the other known networks that libcni's cache
// holds an attachment of its ID in, by interface name. A named network
// the cache knows takes the interface the cache says (Connect may have
// put it elsewhere); one the cache does not know keeps its place — its
// ADD may have been cut short before anything was cached — unless the
// cache proves that interface is another network's. A network only the
// cache knows is told the args and port mappings it was attached with.
func (c *Configurator) attachmentsOf(alloc *Allocation, req request, forTeardown bool) ([]foundAttachment, error) {
	atts, err := c.networksOf(alloc, forTeardown)
	if err != nil {
		return nil, err
	}
	cached, err := c.lib.GetCachedAttachments(req.id)
	if err != nil {
		c.logger.Warn("reading libcni's cache failed: only the allocation's own networks are covered",
			"alloc_id", req.id, "cache_dir", c.cacheDir, "error", err)
	}
	cachedIfs := map[string][]*libcni.NetworkAttachment{} // by network
	ifOwner := map[string]string{}                        // interface → network, per the cache
	for _, a := range cached {
		cachedIfs[a.Network] = append(cachedIfs[a.Network], a)
		ifOwner[a.IfName] = a.Network
	}
	var found []foundAttachment
	for _, att := range atts {
		as := cachedIfs[att.name()]
		delete(cachedIfs, att.name())
		if len(as) == 0 {
			if owner, taken := ifOwner[att.ifName]; !taken || owner == att.name() {
				found = append(found, foundAttachment{att: att, req: req})
			}
			continue
		}
		for i, a := range as {
			fa := foundAttachment{att: att, req: req, cached: true}
			if a.IfName != att.ifName {
				fa.att.ifName, fa.att.viaCNI = a.IfName, false
			}
			if i > 0 {
				fa.req = cachedRequest(req, a)
			}
			found = append(found, fa)
		}
	}
	found = append(found, c.cachedOnly(req, cachedIfs, forTeardown)...)
	if forTeardown {
		found = append(found, c.recordedOnly(req, found)...)
	}
	return found, nil
}

// recordedOnly turns the intent records of att's id on known networks
// that no member covers into members: a DEL of them began (libcni's cache
// is gone with it) and its force cleanup never finished, so a Teardown
// or Disconnect finishes it.
func (c *Configurator) recordedOnly(req request, found []foundAttachment) []foundAttachment {
	var out []foundAttachment
	for _, r := range footprint.IntentRecordsOf(c.cacheDir, req.id, c.nets.names()) {
		if slices.ContainsFunc(found, func(fa foundAttachment) bool { return fa.att.name() == r.Network }) {
			continue
		}
		conf, err := c.knownConf(r.Network, true)
		if err != nil {
			continue
		}
		out = append(out, foundAttachment{att: attachment{conf: conf, ifName: cmp.Or(r.IfName, c.ifName)}, req: req, cached: true})
	}
	return out
}

// cachedOnly turns the cached attachments of networks the allocation does
// not name into members, sorted by interface name; a network this
// Configurator does not know is not its to detach.
func (c *Configurator) cachedOnly(req request, byNetwork map[string][]*libcni.NetworkAttachment, forTeardown bool) []foundAttachment {
	var found []foundAttachment
	for name, as := range byNetwork {
		conf, err := c.knownConf(name, forTeardown)
		if err != nil {
			c.logger.Debug("cached attachment of a network this configurator does not know left alone",
				"alloc_id", req.id, "network", name)
			continue
		}
		for _, a := range as {
			found = append(found, foundAttachment{att: attachment{conf: conf, ifName: a.IfName}, req: cachedRequest(req, a), cached: true})
		}
	}
	slices.SortFunc(found, func(a, b foundAttachment) int {
		if d := c.ifIndex(a.att.ifName) - c.ifIndex(b.att.ifName); d != 0 {
			return d
		}
		return strings.Compare(a.att.name(), b.att.name())
	})
	return found
}

// cachedRequest is att with the args and port mappings that libcni
// cached for a, where it cached them.
func cachedRequest(req request, a *libcni.NetworkAttachment) request {
	if len(a.CniArgs) > 0 {
		req.args = a.CniArgs
	}
	if raw, ok := a.CapabilityArgs["portMappings"]; ok {
		var mappings []cni.PortMapping
		if b, err := json.Marshal(raw); err == nil && json.Unmarshal(b, &mappings) == nil {
			req.mappings = mappings
		}
	}
	return req
}

// knownConf returns the conflist of a network this Configurator knows;
// forTeardown also accepts one that a Reload dropped, and a closed
// Configurator.
func (c *Configurator) knownConf(name string, forTeardown bool) (network, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed && !forTeardown {
		return network{}, fmt.Errorf("%w: network %q", ErrClosed, name)
	}
	if conf, ok := c.nets.byName[name]; ok {
		return conf, nil
	}
	if conf, ok := c.retired[name]; ok && forTeardown {
		return conf, nil
	}
	return network{}, fmt.Errorf("%w: no network %q (known: %s)", ErrNetworkNotFound, name, strings.Join(c.nets.names(), ", "))
}

// freeIfName returns <prefix>N for the lowest N no name in used has.
func (c *Configurator) freeIfName(used []string) string {
	for i := 0; ; i++ {
		if name := c.ifPrefix + strconv.Itoa(i); !slices.Contains(used, name) {
			return name
		}
	}
}

// ifIndex is N of <prefix>N, or a large number for any other name.
func (c *Configurator) ifIndex(ifName string) int {
	if n, err := strconv.Atoi(strings.TrimPrefix(ifName, c.ifPrefix)); err == nil && strings.HasPrefix(ifName, c.ifPrefix) && n >= 0 {
		return n
	}
	return 1 << 30
}

// checkNetworkName rejects a network name no conflist can have.
func checkNetworkName(name string) error {
	if !networkNameRule.MatchString(name) {
		return fmt.Errorf("%w: network name %q does not match %s", ErrInvalidArgument, name, networkNameRule)
	}
	return nil
}
