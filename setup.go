package cninet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/telemetry"
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
// any plugin runs, and so is (ErrRecordUnreadable) a network whose record
// in the host registry this cninet cannot read (damaged, or a newer
// cninet's): the file is kept byte for byte, and the error names it.
func (c *Configurator) Setup(ctx context.Context, alloc *Allocation, netns string) (_ *NetworkStatus, err error) {
	ctx, op := c.tel.StartOp(ctx, telemetry.OpSetup, allocID(alloc), netns)
	defer func() { op.End(err) }()
	req, err := c.requests.requestIn(alloc, netns, ErrInvalidArgument)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	leave, err := c.registry.enter(ctx, req.id, true)
	if err != nil {
		return nil, err
	}
	defer leave()
	locked := time.Now()
	atts, err := c.find.named(alloc, false)
	if err != nil {
		return nil, err
	}
	a := c.attacher.attaching(c.owners.ownerOf(ctx), req, netns, false)
	for _, att := range atts {
		if err := a.preflight(att); err != nil {
			return nil, err
		}
	}
	logFound(c.logger, telemetry.OpSetup, req.id, len(atts), locked.Sub(start), time.Since(locked))
	return a.all(ctx, atts)
}

// attacher makes attachings: the parts an attach uses, and the detacher
// of its rollback.
type attacher struct {
	registry *hostRegistry
	plugins  *catalog.Plugins
	drivers  *drivers
	tel      *telemetry.Recorder
	logger   hclog.Logger
	retry    RetryPolicy // Config.Retry, its defaults applied
	detacher *detacher
}

// attaching is one Setup or Connect of a workload: the networks it
// attaches, each recorded before its ADD, retried, and all rolled back
// when one fails.
type attaching struct {
	*attacher
	owner  string // whose the records are
	req    request
	netns  string
	others bool // the workload keeps attachments besides those attached (Connect)
	// anyResult accepts a result without an address (an L2-only network):
	// the caller, a CNI runtime, reads the result itself (Connect with
	// ConnectOptions.IfName).
	anyResult bool
	// loUp: the workload's lo was up before (keepLoopback); a DEL that
	// undoes this attachment leaves the loopback plugin out.
	loUp bool
}

// attaching starts an attachment of req's workload in netns for owner.
func (at *attacher) attaching(owner string, req request, netns string, others bool) attaching {
	return attaching{attacher: at, owner: owner, req: req, netns: netns, others: others}
}

// undoing is the detachment that undoes a's attachments: a rollback, the
// DEL between attempts.
func (a attaching) undoing() detachment {
	d := a.detacher.detaching(a.owner, a.netns, a.others)
	d.rollback, d.loUp = true, a.loUp
	return d
}

// preflight fails before anything runs when a plugin of att's network
// that cninet would run is missing, or a registry file this cninet
// cannot read stands where att's record belongs (ErrRecordUnreadable).
func (a attaching) preflight(att attachment) error {
	if err := a.registry.refuseUnreadable(a.req.id, att.name(), att.ifName); err != nil {
		return err
	}
	if !a.drivers.driverFor(att).runsPlugins() {
		return nil // an injected cni.CNI finds its plugins itself
	}
	return a.plugins.Check(att.conf)
}

// all attaches atts concurrently, all or nothing (see Setup), and
// returns their statuses in the order of atts. With others, a rollback
// takes only atts away, and no DEL may reach the others (see
// detachment.one).
func (a attaching) all(ctx context.Context, atts []attachment) (*NetworkStatus, error) {
	req := a.req
	alongside := a.others || len(atts) > 1
	sts := make([]*NetworkStatus, len(atts))
	errs := make([]error, len(atts))
	attachCtx, cancel := context.WithCancel(ctx)
	eachNetwork(len(atts), func(i int) {
		if err := attachCtx.Err(); err != nil { // another network failed before this one started
			errs[i] = fmt.Errorf("%w: allocation %s in network %q: not attempted: %w", ErrSetupFailed, req.id, atts[i].name(), err)
			return
		}
		if sts[i], errs[i] = a.one(attachCtx, atts[i], alongside); errs[i] != nil {
			cancel() // the others' ADDs are pointless now: all or nothing
		}
	})
	cancel() // every ADD returned: nothing is still adding when the rollback runs
	if failed := setupFailures(ctx, errs); failed != nil {
		if rerr := a.rollback(ctx, atts); rerr != nil {
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
// see detachment.one), so networks attach and detach in parallel.
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

// one adds one network, with retries, and reads its status.
func (a attaching) one(ctx context.Context, att attachment, alongside bool) (_ *NetworkStatus, err error) {
	c, req := a.attacher, a.req
	ctx, op := c.tel.StartNetwork(ctx, telemetry.OpAttach, att.name(), att.ifName, req.id, a.netns)
	defer func() { op.End(err) }()
	recordStart := time.Now()
	rec, err := c.registry.recordAdding(a.owner, req, att, a.netns)
	if err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: recording the attachment before its ADD: %w", ErrSetupFailed, req.id, att.name(), err)
	}
	recorded := time.Since(recordStart)
	res, raw, err := a.withRetry(ctx, att, alongside)
	if err != nil {
		return nil, err
	}
	recordStart = time.Now()
	if err := c.registry.recordAttached(rec, res, raw); err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: %w", ErrSetupFailed, req.id, att.name(), err)
	}
	c.logger.Debug("attachment recorded", "alloc_id", req.id, "network", att.name(), "record", recorded+time.Since(recordStart))
	st, err := StatusFromResult(res)
	if err != nil && a.anyResult && res != nil && errors.Is(err, ErrNoAddress) {
		return &NetworkStatus{IfName: att.ifName, DNS: dnsFromResult(res)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: %w", ErrSetupFailed, req.id, att.name(), err)
	}
	return st, nil
}

// rollback removes what a failed Setup attached: every network of the
// allocation, the ones that failed and the ones cancelled halfway
// included (DEL is idempotent). It runs on its own deadline: the caller's
// context may be the very reason Setup failed; only its values (the
// trace) carry over. What it could not remove (a held xtables lock, say)
// is left for a Teardown, and its error says so.
func (a attaching) rollback(ctx context.Context, atts []attachment) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	found := make([]foundAttachment, len(atts))
	for i, att := range atts {
		found[i] = foundAttachment{att: att, req: a.req}
	}
	ctx, span := a.tel.StartSpan(ctx, telemetry.SpanRollback)
	err := a.undoing().all(ctx, found)
	span.End(err)
	if err != nil {
		a.logger.Error("rollback of failed setup incomplete", "alloc_id", a.req.id, "error", err)
	}
	return err
}

var rollbackTimeout = 30 * time.Second // a variable only for tests: a rollback behind a held lock waits it out
