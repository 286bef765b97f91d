package cninet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// Setup attaches the network namespace at netns to the networks the
// allocation names (Allocation.NetworkNames, in order, as <prefix>0,
// <prefix>1, …), or to the default network, and returns the workload's
// addresses. The networks attach concurrently, each with its own retry
// loop: a failed ADD is retried per the RetryPolicy with a DEL in between
// (host-local refuses a second ADD for the same id). Interface names and
// NetworkStatus.Networks follow the allocation's order whatever order the
// plugins finish in. Setup is all or nothing: when a network fails for
// good, or ctx is done, or a result has no usable address, the other
// networks' ADDs are cancelled, Setup waits for every one of them, and
// then detaches every network of the allocation (DEL and force cleanup,
// also of a network whose ADD was cut short) before it returns; the error
// joins one ErrSetupFailed error per network that failed, each naming its
// network. The rollback runs on a deadline of its own (30s), so Setup
// returns at most that long after ctx is done; what it could not remove
// (behind a held xtables lock, say) is named in the error, wrapped
// (ErrCleanupFailed, ErrXtablesLock), and a Teardown of the allocation
// finishes it. An unknown network is an ErrNetworkNotFound error before
// any plugin runs.
func (c *Configurator) Setup(ctx context.Context, alloc *Allocation, netns string) (_ *NetworkStatus, err error) {
	ctx, op := c.tel.startOp(ctx, opSetup, allocID(alloc), netns)
	defer func() { op.end(err) }()
	att, err := c.attachmentIn(alloc, netns)
	if err != nil {
		return nil, err
	}
	defer c.adm.enter(att.id)()
	nets, err := c.networksOf(alloc, false)
	if err != nil {
		return nil, err
	}
	for _, n := range nets {
		if err := c.preflight(n); err != nil {
			return nil, err
		}
	}
	return c.attachAll(ctx, att, netns, nets)
}

// attachAll attaches nets concurrently (see byBackend and enterAttempt),
// all or nothing (see Setup), and returns their statuses in the order of
// nets.
func (c *Configurator) attachAll(ctx context.Context, att attachment, netns string, nets []netAttachment) (*NetworkStatus, error) {
	sts := make([]*NetworkStatus, len(nets))
	errs := make([]error, len(nets))
	attachCtx, cancel := context.WithCancel(context.WithValue(ctx, attemptGateKey{}, &sync.RWMutex{}))
	order := make([]int, len(nets))
	for i := range nets {
		order[i] = i
	}
	byBackend(nets, order, false, func(i int) {
		if err := attachCtx.Err(); err != nil { // another network failed before this one started
			errs[i] = fmt.Errorf("%w: allocation %s in network %q: not attempted: %w", ErrSetupFailed, att.id, nets[i].name(), err)
			return
		}
		if sts[i], errs[i] = c.attach(attachCtx, att, nets[i], netns); errs[i] != nil {
			cancel() // the others' ADDs are pointless now: all or nothing
		}
	})
	cancel() // byBackend returned: nothing is still adding when the rollback runs
	if failed := setupFailures(ctx, errs); failed != nil {
		if rerr := c.rollback(ctx, att, netns, nets); rerr != nil {
			failed = fmt.Errorf("%w; rollback incomplete, Teardown the allocation to finish it: %w", failed, rerr)
		}
		return nil, failed
	}
	status := &NetworkStatus{}
	for i, n := range nets {
		status.add(n.name(), sts[i])
	}
	return status, nil
}

// byBackend runs fn(i) for each i of order and returns when all have
// returned: concurrently, except, with serialNFT, for the networks whose
// portmap uses its nftables backend, which run one after another, in
// order, on the calling goroutine. That portmap's DEL lists every
// hostport rule carrying the container id, in every network, then deletes
// them: two such DELs at once make one fail halfway (the other deleted
// its rules first), and libcni stops a network's DEL chain at the plugin
// that failed, leaving the rest of that network's DEL undone. Every other
// plugin's DEL and cleanup touches only state named after its own network
// or proven by its own addresses, so those run in parallel with each
// other and with the nftables ones. ADDs never delete, so they all run
// concurrently; only a retry's detach among them needs care (see
// enterAttempt). A single network runs without a goroutine.
func byBackend(nets []netAttachment, order []int, serialNFT bool, fn func(i int)) {
	if len(order) == 1 {
		fn(order[0])
		return
	}
	var wg sync.WaitGroup
	var serial []int
	for _, i := range order {
		if serialNFT && nets[i].conf.info.footprint.HostportNFT {
			serial = append(serial, i)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	for _, i := range serial {
		fn(i)
	}
	wg.Wait()
}

// attemptGateKey carries, in the context of one Setup's concurrent ADDs, a
// lock that the ADD attempts of networks whose portmap uses its nftables
// backend share and that a retry's detach of such a network takes alone:
// that DEL would take the hostport rules another such network's ADD is
// writing, after the guard had listed what to keep. It travels in the
// context so that the retry loop's signature stays as it is.
type attemptGateKey struct{}

// enterAttempt waits until n may start an ADD attempt (detach false) or a
// detach between attempts (detach true), and returns the func that ends
// it. Outside a Setup of several networks, and for networks whose portmap
// does not use nftables, it does not wait.
func enterAttempt(ctx context.Context, n netAttachment, detach bool) (done func()) {
	gate, _ := ctx.Value(attemptGateKey{}).(*sync.RWMutex)
	switch {
	case gate == nil || !n.conf.info.footprint.HostportNFT:
		return func() {}
	case detach:
		gate.Lock()
		return gate.Unlock
	default:
		gate.RLock()
		return gate.RUnlock
	}
}

// setupFailures joins the errors of the networks that failed, in the
// allocation's order. A network whose ADD was only cancelled because
// another one failed did not fail itself and is left out, unless the
// caller's ctx is done: then that is every network's failure.
func setupFailures(ctx context.Context, errs []error) error {
	var failed, cancelled []error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled) && ctx.Err() == nil:
			cancelled = append(cancelled, err)
		default:
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 {
		failed = cancelled // cannot happen unless a plugin itself returned context.Canceled
	}
	return joinErrors(failed)
}

// attach adds one network, with retries, and reads its status.
func (c *Configurator) attach(ctx context.Context, att attachment, n netAttachment, netns string) (_ *NetworkStatus, err error) {
	ctx, op := c.tel.startNetwork(ctx, opAttach, n.name(), n.ifName, att.id, netns)
	defer func() { op.end(err) }()
	res, err := c.addWithRetry(ctx, att, n, netns)
	if err != nil {
		return nil, err
	}
	st, err := StatusFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: %w", ErrSetupFailed, att.id, n.name(), err)
	}
	return st, nil
}

// preflight fails Setup before anything runs when a plugin of n that
// cninet would run is missing.
func (c *Configurator) preflight(n netAttachment) error {
	if !c.driverFor(n).runsPlugins() {
		return nil // an injected cni.CNI finds its plugins itself
	}
	return c.checkPlugins(n.conf)
}

// pluginsFound is a conflist whose plugins were all found, and when.
type pluginsFound struct {
	list  *libcni.NetworkConfigList
	stamp []time.Time
}

// checkPlugins fails when a plugin binary of conf is missing: a chain that
// fails halfway through leaves a veth until the namespace goes, and a DEL
// cannot run a plugin that is not there either. The answer is kept until
// the conflist or a plugin directory changes.
func (c *Configurator) checkPlugins(conf loadedConf) error {
	stamp := c.pluginDirsStamp()
	c.pluginsMu.Lock()
	defer c.pluginsMu.Unlock()
	if ok := c.pluginsOKByName[conf.info.name]; ok.list == conf.list && slices.Equal(ok.stamp, stamp) {
		return nil
	}
	if err := c.checkPluginsIn(conf); err != nil {
		return err
	}
	if c.pluginsOKByName == nil {
		c.pluginsOKByName = map[string]pluginsFound{}
	}
	c.pluginsOKByName[conf.info.name] = pluginsFound{conf.list, stamp}
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
		return fmt.Errorf("%w: %s not found in %s (network %q)", ErrPluginMissing,
			strings.Join(missing, ", "), strings.Join(c.pluginDirs, ":"), conf.info.name)
	}
	return nil
}

// rollback removes what a failed Setup attached: every network of the
// allocation, the ones that failed and the ones cancelled halfway
// included (DEL is idempotent). It runs on its own deadline: the caller's
// context may be the very reason Setup failed; only its values (the
// trace) carry over. What it could not remove (a held xtables lock, say)
// is left for a Teardown, and its error says so.
func (c *Configurator) rollback(ctx context.Context, att attachment, netns string, nets []netAttachment) error {
	ctx, cancel := context.WithTimeout(inSetup(context.WithoutCancel(ctx)), rollbackTimeout)
	defer cancel()
	members := make([]member, len(nets))
	for i, n := range nets {
		members[i] = member{n: n, att: att}
	}
	ctx, span := c.tel.startSpan(ctx, spanRollback)
	err := c.detachAll(ctx, netns, members)
	span.end(err)
	if err != nil {
		c.logger.Error("rollback of failed setup incomplete", "alloc_id", att.id, "error", err)
	}
	return err
}

const rollbackTimeout = 30 * time.Second

// Teardown detaches the namespace from every network the allocation is
// attached to: the networks it names (the same Allocation as Setup's) and
// every other network of this Configurator that libcni's cache knows an
// attachment of its ID in (networks added with Connect, even when the
// Allocation no longer names them). It removes whatever the plugins left:
// per network, DEL with the same port mappings and args as Setup (for a
// network only the cache knows, those it was attached with), then,
// whatever DEL returned, a force cleanup of everything the plugins are
// known to leave (iptables and ip6tables rules and chains, nftables
// rules, IPAM reservations, the cached result), by the ownership rule of
// internal/footprint. Its cost follows what one attachment can own, not
// the size of the host's ruleset. Networks are detached concurrently,
// except those whose portmap uses its nftables backend, which are
// detached one after another (see byBackend). One network's failure does
// not stop the others; the error joins each network's, the last network
// first. It is idempotent: tearing down twice, or tearing down what was
// never set up, returns nil. netns may be empty or already deleted.
func (c *Configurator) Teardown(ctx context.Context, alloc *Allocation, netns string) (err error) {
	ctx, op := c.tel.startOp(ctx, opTeardown, allocID(alloc), netns)
	defer func() { op.end(err) }()
	att, err := newAttachment(alloc, c.ignoreHostIP)
	if err != nil {
		return err
	}
	defer c.adm.enter(att.id)()
	members, err := c.membersOf(alloc, att, true)
	if err != nil {
		return err
	}
	return c.detachAll(ctx, netns, members)
}

// detachAll detaches members, concurrently except where byBackend says
// why not, the last network's turn first, every one of them departing
// until all are done (nothing a DEL takes from one is added back); one
// network's failure does not stop the others, and the errors are joined
// the last network first.
func (c *Configurator) detachAll(ctx context.Context, netns string, members []member) error {
	defer c.adm.depart(departing(members))()
	errs := make([]error, len(members))
	nets := make([]netAttachment, len(members))
	order := make([]int, len(members))
	for i, m := range members {
		nets[i], order[len(members)-1-i] = m.n, i
	}
	byBackend(nets, order, true, func(i int) { errs[i] = c.detach(ctx, members[i].att, netns, members[i].n) })
	var failed []error
	for _, i := range order {
		if errs[i] != nil {
			failed = append(failed, errs[i])
		}
	}
	return joinErrors(failed)
}

// departing is the attachments of members: while they are torn down,
// nothing a DEL takes from one of them is added back.
func departing(members []member) []footprint.Attachment {
	atts := make([]footprint.Attachment, len(members))
	for i, m := range members {
		atts[i] = footprint.Attachment{Network: m.n.name(), ID: m.att.id}
	}
	return atts
}

// joinErrors is errors.Join that returns a lone error as it is.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// detach is one network's DEL plus force cleanup. Before the DEL, the
// cleaner records what the plugins' DEL would wrongly take from other
// attachments (the firewall plugin deletes by the address of a cached
// result that may be stale; portmap's nftables DEL by the bare id on
// every network), and adds it back afterwards. When that cannot be read,
// the DEL is withheld (it could harm a neighbour unseen) and only the
// force cleanup runs: the error says so, and a later Teardown finishes.
// A failed DEL is only logged when the cleanup then removed everything:
// what matters is that nothing is left.
func (c *Configurator) detach(ctx context.Context, att attachment, netns string, n netAttachment) (err error) {
	ctx, op := c.tel.startNetwork(ctx, opDetach, n.name(), n.ifName, att.id, netns)
	defer func() { op.end(err) }()
	start := time.Now()
	cl := footprint.NewCleaner(ctx, c.footprintNetwork(n.conf, n.ifName, nil), c.host())
	cl.Live = func(a footprint.Attachment) bool { return !c.adm.isDeparting(a) }
	var removeErr error
	guardErr := cl.Remember([]string{att.id}) // DEL erases the proof of the attachment's addresses
	if guardErr == nil {
		delCtx, delSpan := c.tel.startSpan(ctx, spanDel)
		removeErr = c.driverFor(n).del(delCtx, att, n, netns)
		delSpan.end(removeErr)
	} else {
		guardErr = fmt.Errorf("%w in network %q: DEL withheld, since what it would take from other attachments could not be read: %w",
			ErrCleanupFailed, n.name(), guardErr)
	}
	delDone := time.Now()
	_, cleanSpan := c.tel.startSpan(ctx, spanCleanup)
	removed, cleanErr := cl.Clean([]string{att.id})
	c.tel.cleaned(ctx, cleanSpan, n.name(), removed, cleanErr)
	c.logRemoved(att.id, n.name(), removed, removeErr)
	c.logRestored(cl.Restored(), "DEL of "+att.id+" on network "+n.name())
	c.logger.Debug("network detached", "alloc_id", att.id, "network", n.name(), "del", delDone.Sub(start), "cleanup", time.Since(delDone))
	if cleanErr != nil {
		cleanErr = fmt.Errorf("%w in network %q: %w", ErrCleanupFailed, n.name(), cleanErr)
	}
	if err := errors.Join(guardErr, cleanErr); err != nil {
		if removeErr != nil {
			return fmt.Errorf("teardown of allocation %s: DEL: %w; %w", att.id, removeErr, err)
		}
		return fmt.Errorf("teardown of allocation %s: %w", att.id, err)
	}
	if removeErr != nil {
		c.logger.Warn("CNI DEL failed; force cleanup removed what was left", "alloc_id", att.id, "network", n.name(), "error", removeErr)
	}
	return nil
}

// logRemoved reports what the plugins left behind and cleanup removed.
func (c *Configurator) logRemoved(id, network string, removed []footprint.Item, delErr error) {
	if len(removed) == 0 {
		return
	}
	items := make([]string, len(removed))
	for i, it := range removed {
		items[i] = it.Detail
	}
	c.logger.Warn("removed state the CNI plugins left behind", "alloc_id", id, "network", network, "del_error", delErr, "items", items)
}

// logRestored reports the port mappings of other attachments that a DEL
// (or libcni's GC) removed and cleanup added back.
func (c *Configurator) logRestored(items []footprint.Item, after string) {
	if len(items) == 0 {
		return
	}
	details := make([]string, len(items))
	for i, it := range items {
		details[i] = it.Detail
	}
	c.logger.Warn("added back other attachments' port mappings that a DEL of the same container id removed",
		"after", after, "items", details)
}
