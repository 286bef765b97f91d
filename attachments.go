package cninet

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// attachment is one allocation on one network, with its interface name
// (at first its place in the allocation's list).
type attachment struct {
	conf   networkConf
	ifName string // ifPrefix + the network's index in the allocation's list
	// viaCNI: the default network as the first interface, which go-cni (or
	// Config.CNI) attaches — the single-network path, unchanged.
	viaCNI bool
}

func (att attachment) name() string { return att.conf.info.name }

// networksOf resolves the networks alloc joins, in order: its
// NetworkNames, or the default network. An unknown name fails before any
// plugin runs. Teardown (forTeardown) may still name a network that a
// Reload dropped, and works after Close.
func (c *Configurator) networksOf(alloc *Allocation, forTeardown bool) ([]attachment, error) {
	c.mu.RLock()
	def, reg, retired, closed := c.conf, c.nets, c.retired, c.closed
	c.mu.RUnlock()
	if closed && !forTeardown {
		return nil, fmt.Errorf("%w: network %q", ErrClosed, def.info.name)
	}
	names := alloc.NetworkNames
	if len(names) == 0 {
		names = []string{def.info.name}
	}
	atts := make([]attachment, 0, len(names))
	var unknown []string
	for i, name := range names {
		if i == 0 && name == def.info.name {
			conf, err := c.current()
			if err != nil && !(forTeardown && errors.Is(err, ErrClosed)) {
				return nil, err
			}
			atts = append(atts, attachment{conf: conf, ifName: c.ifName, viaCNI: true})
			continue
		}
		conf, ok := reg.byName[name]
		if !ok && forTeardown {
			conf, ok = retired[name]
		}
		if !ok && forTeardown && c.recordedIn(alloc.ID, name) {
			continue // its conflist went: the record has it (withRecords)
		}
		if !ok {
			unknown = append(unknown, strconv.Quote(name))
		}
		atts = append(atts, attachment{conf: conf, ifName: c.ifPrefix + strconv.Itoa(i)})
	}
	if len(unknown) > 0 {
		err := fmt.Errorf("%w: allocation %s: no network %s (known: %s)",
			ErrNetworkNotFound, alloc.ID, strings.Join(unknown, ", "), strings.Join(reg.names(), ", "))
		if len(reg.skipped) > 0 {
			err = fmt.Errorf("%w; %d unreadable file(s) skipped: %w", err, len(reg.skipped), errors.Join(reg.skipped...))
		}
		return nil, err
	}
	return atts, nil
}

// foundAttachment is an attachment as found in the allocation and in
// libcni's cache, with the request its plugins are told.
type foundAttachment struct {
	att    attachment
	req    request
	cached bool // libcni's cache knows the attachment
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

// attached drops from an allocation's found attachments the networks the
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

// recordedOnly turns the intent records of req's id on known networks
// that no found attachment covers into found attachments: a DEL of them began (libcni's cache
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
// not name into found attachments, sorted by interface name; a network this
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

// ifNames are the interface names an attachment of any network may have:
// a workload joining n networks has <prefix>0 … <prefix>(n-1).
func (c *Configurator) ifNames(n int) []string {
	names := make([]string, max(n, 1))
	for i := range names {
		names[i] = c.ifPrefix + strconv.Itoa(i)
	}
	return names
}

// cachedAt returns libcni's cached attachment of id in network as ifName,
// or nil.
func (c *Configurator) cachedAt(id, network, ifName string) *libcni.NetworkAttachment {
	cached, err := c.lib.GetCachedAttachments(id)
	if err != nil {
		c.logger.Warn("reading libcni's cache failed", "alloc_id", id, "cache_dir", c.cacheDir, "error", err)
		return nil
	}
	for _, a := range cached {
		if a.Network == network && a.IfName == ifName {
			return a
		}
	}
	return nil
}

// CachedResult returns the CNI result libcni cached when allocation id was
// attached to network as ifName (by Setup or Connect), in the
// network's CNI version: every interface, address, route and DNS setting
// the plugins reported. It is nil, with a nil error, when the cache holds
// none. A network this Configurator does not know is ErrNetworkNotFound.
func (c *Configurator) CachedResult(id, network, ifName string) (types.Result, error) {
	conf, err := c.knownConf(network, true)
	if err != nil {
		return nil, err
	}
	res, err := c.lib.GetNetworkListCachedResult(conf.list, &libcni.RuntimeConf{ContainerID: id, IfName: ifName})
	if err != nil {
		return nil, fmt.Errorf("%w: cached result of allocation %s in network %q as %s: %w", ErrIO, id, network, ifName, err)
	}
	return res, nil
}
