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
	req, err := c.requestIn(alloc, netns)
	if err != nil {
		return nil, err
	}
	defer c.adm.Enter(req.id)()
	atts, err := c.networksOf(alloc, false)
	if err != nil {
		return nil, err
	}
	for _, att := range atts {
		if err := c.preflight(att); err != nil {
			return nil, err
		}
	}
	return c.attachAll(ctx, req, netns, atts, false)
}

// attachAll attaches nets concurrently, all or nothing (see Setup), and
// returns their statuses in the order of nets. others says the workload
// keeps attachments besides nets (Connect): a rollback then takes only
// nets away, and no DEL may reach the others (see detach).
func (c *Configurator) attachAll(ctx context.Context, req request, netns string, atts []attachment, others bool) (*NetworkStatus, error) {
	alongside := others || len(atts) > 1
	sts := make([]*NetworkStatus, len(atts))
	errs := make([]error, len(atts))
	attachCtx, cancel := context.WithCancel(ctx)
	eachNetwork(len(atts), func(i int) {
		if err := attachCtx.Err(); err != nil { // another network failed before this one started
			errs[i] = fmt.Errorf("%w: allocation %s in network %q: not attempted: %w", ErrSetupFailed, req.id, atts[i].name(), err)
			return
		}
		if sts[i], errs[i] = c.attach(attachCtx, req, atts[i], netns, alongside); errs[i] != nil {
			cancel() // the others' ADDs are pointless now: all or nothing
		}
	})
	cancel() // every ADD returned: nothing is still adding when the rollback runs
	if failed := setupFailures(ctx, errs); failed != nil {
		if rerr := c.rollback(ctx, req, netns, atts, others); rerr != nil {
			failed = fmt.Errorf("%w; rollback incomplete, Teardown the allocation to finish it: %w", failed, rerr)
		}
		return nil, failed
	}
	status := &NetworkStatus{}
	for i, att := range atts {
		status.add(att.name(), sts[i])
	}
	return status, nil
}

// eachNetwork runs fn(i) for i in [0, n) concurrently and returns when
// all have returned; a single network runs without a goroutine. No DEL
// cninet runs can reach another network's state (the prevention rule,
// see detach), so networks attach and detach in parallel.
func eachNetwork(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
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
func (c *Configurator) attach(ctx context.Context, req request, att attachment, netns string, alongside bool) (_ *NetworkStatus, err error) {
	ctx, op := c.tel.startNetwork(ctx, opAttach, att.name(), att.ifName, req.id, netns)
	defer func() { op.end(err) }()
	res, err := c.addWithRetry(ctx, req, att, netns, alongside)
	if err != nil {
		return nil, err
	}
	st, err := StatusFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: %w", ErrSetupFailed, req.id, att.name(), err)
	}
	return st, nil
}

// preflight fails Setup before anything runs when a plugin of n that
// cninet would run is missing.
func (c *Configurator) preflight(att attachment) error {
	if !c.driverFor(att).runsPlugins() {
		return nil // an injected cni.CNI finds its plugins itself
	}
	return c.checkPlugins(att.conf)
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
func (c *Configurator) checkPlugins(conf network) error {
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
func (c *Configurator) checkPluginsIn(conf network) error {
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
func (c *Configurator) rollback(ctx context.Context, req request, netns string, atts []attachment, others bool) error {
	ctx, cancel := context.WithTimeout(inSetup(context.WithoutCancel(ctx)), rollbackTimeout)
	defer cancel()
	found := make([]foundAttachment, len(atts))
	for i, att := range atts {
		found[i] = foundAttachment{att: att, req: req}
	}
	ctx, span := c.tel.startSpan(ctx, spanRollback)
	err := c.detachAll(ctx, netns, found, others)
	span.end(err)
	if err != nil {
		c.logger.Error("rollback of failed setup incomplete", "alloc_id", req.id, "error", err)
	}
	return err
}

const rollbackTimeout = 30 * time.Second

// Teardown detaches the namespace from every network the allocation is
// attached to: the networks it names (the same Allocation as Setup's),
// every other network of this Configurator that libcni's cache knows an
// attachment of its ID in (networks added with Connect, even when the
// Allocation no longer names them), and every network where an intent
// record says a detach of its ID was cut short (see the prevention rule
// in internal/footprint). It removes whatever the plugins left:
// per network, DEL with the same port mappings and args as Setup (for a
// network only the cache knows, those it was attached with), then,
// whatever DEL returned, a force cleanup of everything the plugins are
// known to leave (iptables and ip6tables rules and chains, nftables
// rules, IPAM reservations, the cached result), by the ownership rule of
// internal/footprint. Its cost follows what one attachment can own, not
// the size of the host's ruleset. Networks are detached concurrently.
// No DEL can take anything of another attachment (the prevention rule, see
// detach), and a Teardown killed at any point is finished by the next
// one. One network's failure does
// not stop the others; the error joins each network's, the last network
// first. It is idempotent: tearing down twice, or tearing down what was
// never set up, returns nil. netns may be empty or already deleted.
func (c *Configurator) Teardown(ctx context.Context, alloc *Allocation, netns string) (err error) {
	ctx, op := c.tel.startOp(ctx, opTeardown, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := newRequest(alloc, c.ignoreHostIP)
	if err != nil {
		return err
	}
	defer c.adm.Enter(req.id)()
	found, err := c.attachmentsOf(alloc, req, true)
	if err != nil {
		return err
	}
	return c.detachAll(ctx, netns, found, false)
}

// detachAll detaches members concurrently; one network's failure does
// not stop the others, and the errors are joined the last network first.
// others says the workload keeps attachments besides members (Disconnect,
// a Connect rolled back). With several members, or others, no member's
// DEL runs portmap's nftables backend, which deletes by the bare
// container id on every network (see detach); when the whole workload
// goes, that DEL runs once for all of them first (delHostportsOnce).
func (c *Configurator) detachAll(ctx context.Context, netns string, found []foundAttachment, others bool) error {
	alongside := others || len(found) > 1
	if alongside && !others {
		c.delHostportsOnce(ctx, netns, found)
	}
	errs := make([]error, len(found))
	eachNetwork(len(found), func(i int) { errs[i] = c.detach(ctx, found[i].req, netns, found[i].att, alongside) })
	var failed []error
	for i := len(errs) - 1; i >= 0; i-- {
		if errs[i] != nil {
			failed = append(failed, errs[i])
		}
	}
	return joinErrors(failed)
}

// joinErrors is errors.Join that returns a lone error as it is.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// detach is one network's DEL plus force cleanup, by the prevention rule:
// before the DEL, the cleaner makes sure it cannot reach another
// attachment's state (footprint.Cleaner.Prevent). The cached result the
// firewall plugin deletes by keeps only the addresses the attachment
// provably still owns, and portmap is left out of the DEL where its
// nftables backend would delete by the bare container id rules of the
// same id on another network — always when alongside (the workload has
// other attachments meanwhile: a Setup's other networks, those a
// Disconnect keeps). What the DEL does not see, the force cleanup removes
// by the ownership rule. When the prevention cannot be made (a file that
// cannot be read or written), the DEL is withheld and only the force
// cleanup runs: the error says so, and a later Teardown finishes. A
// failed DEL is only logged when the cleanup then removed everything:
// what matters is that nothing is left.
func (c *Configurator) detach(ctx context.Context, req request, netns string, att attachment, alongside bool) (err error) {
	ctx, op := c.tel.startNetwork(ctx, opDetach, att.name(), att.ifName, req.id, netns)
	defer func() { op.end(err) }()
	start := time.Now()
	cl := footprint.NewCleaner(ctx, c.footprintNetwork(att.conf, att.ifName, nil), c.host())
	var removeErr error
	prevention, preventErr := cl.Prevent([]string{req.id}) // also reads the proof the DEL erases
	prevented := time.Now()
	if preventErr == nil {
		omit := prevention.Omit
		if alongside && att.conf.info.footprint.HostportNFT && !slices.Contains(omit, "portmap") {
			omit = append(omit, "portmap")
		}
		c.logPrevented(req.id, att.name(), prevention, omit)
		delCtx, delSpan := c.tel.startSpan(ctx, spanDel)
		removeErr = c.driverFor(att).del(delCtx, req, att, netns, omit)
		delSpan.end(removeErr)
	} else {
		preventErr = fmt.Errorf("%w in network %q: DEL withheld, since it could not be kept from other attachments' state: %w",
			ErrCleanupFailed, att.name(), preventErr)
	}
	delDone := time.Now()
	_, cleanSpan := c.tel.startSpan(ctx, spanCleanup)
	removed, cleanErr := cl.Clean([]string{req.id})
	c.tel.cleaned(ctx, cleanSpan, att.name(), removed, cleanErr)
	c.logRemoved(req.id, att.name(), removed, removeErr)
	c.logger.Debug("network detached", "alloc_id", req.id, "network", att.name(),
		"prevent", prevented.Sub(start), "del", delDone.Sub(prevented), "cleanup", time.Since(delDone))
	if cleanErr != nil {
		cleanErr = fmt.Errorf("%w in network %q: %w", ErrCleanupFailed, att.name(), cleanErr)
	}
	if err := errors.Join(preventErr, cleanErr); err != nil {
		if removeErr != nil {
			return fmt.Errorf("teardown of allocation %s: DEL: %w; %w", req.id, removeErr, err)
		}
		return fmt.Errorf("teardown of allocation %s: %w", req.id, err)
	}
	if removeErr != nil {
		c.logger.Warn("CNI DEL failed; force cleanup removed what was left", "alloc_id", req.id, "network", att.name(), "error", removeErr)
	}
	return nil
}

// delHostportsOnce runs, for a whole workload leaving several networks,
// the DEL of portmap's nftables backend once, before the networks are
// detached (each without portmap, concurrently): that DEL deletes every
// hostport rule carrying the container id, on every network, so one is
// all the workload needs, and two at once make one fail halfway. It runs
// only when every such rule is the leaving attachments' own
// (footprint.Cleaner.HostportDELReachesOnlySet): the same id may be
// attached to a network this Configurator does not know, by another
// runtime. It runs on no libcni cache: the networks' own DELs still need
// their cached results. Whatever it does not remove, the force cleanup
// removes by proof; its failure is only logged.
func (c *Configurator) delHostportsOnce(ctx context.Context, netns string, found []foundAttachment) {
	var nft []foundAttachment // those whose portmap DEL would find mappings: without any it does nothing
	var atts []footprint.Attachment
	for _, fa := range found {
		if fa.att.conf.info.footprint.HostportNFT && fa.att.conf.info.portMappings && len(fa.req.mappings) > 0 {
			nft = append(nft, fa)
		}
		atts = append(atts, footprint.Attachment{Network: fa.att.name(), ID: fa.req.id})
	}
	if len(nft) == 0 {
		return
	}
	fa := nft[0]
	cl := footprint.NewCleaner(ctx, c.footprintNetwork(fa.att.conf, fa.att.ifName, nil), c.host())
	if only, err := cl.HostportDELReachesOnlySet(atts); !only {
		c.logger.Debug("portmap's nftables DEL left out: rules of the same container id are not the leaving attachments'",
			"alloc_id", fa.req.id, "error", err)
		return
	}
	ctx, span := c.tel.startSpan(ctx, spanDel)
	err := c.driverFor(fa.att).delHostports(ctx, fa.req, fa.att, netns)
	span.end(err)
	if err != nil {
		c.logger.Warn("portmap's DEL of a leaving workload failed; the force cleanup removes its rules where it can prove them",
			"alloc_id", fa.req.id, "network", fa.att.name(), "error", err)
	}
}

// logPrevented reports what a DEL was kept from: addresses withheld from
// the cached result, plugins left out.
func (c *Configurator) logPrevented(id, network string, p footprint.Prevention, omit []string) {
	if len(p.Withheld) == 0 && len(omit) == 0 {
		return
	}
	var withheld []string
	for _, addrs := range p.Withheld {
		for _, a := range addrs {
			withheld = append(withheld, a.String())
		}
	}
	c.logger.Debug("DEL kept from other attachments' state: the force cleanup removes the rest by proof",
		"alloc_id", id, "network", network, "withheld_addresses", withheld, "plugins_left_out", omit)
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
