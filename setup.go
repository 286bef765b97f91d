package cninet

import (
	"context"
	"errors"
	"fmt"
	"time"

	cni "github.com/containerd/go-cni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// attacher is Setup, and makes the attachings of Connect: the parts an attach uses, and the detacher
// of its rollback.
type attacher struct {
	requests
	owners
	find     *attachmentFinder
	registry *hostRegistry
	plugins  *catalog.Plugins
	drivers  *drivers
	tel      *telemetry.Recorder
	logger   hclog.Logger
	retry    RetryPolicy // Config.Retry, its defaults applied
	detacher *detacher
}

// setup is Setup: the allocation's networks resolved and checked under
// its lock, then attached (all).
func (at *attacher) setup(ctx context.Context, alloc *Allocation, netns string) (_ *NetworkStatus, err error) {
	ctx, op := at.tel.StartOp(ctx, telemetry.OpSetup, allocID(alloc), netns)
	defer func() { op.End(err) }()
	req, err := at.requestIn(alloc, netns, ErrInvalidArgument)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	leave, err := at.registry.enter(ctx, req.id, true)
	if err != nil {
		return nil, err
	}
	defer leave()
	locked := time.Now()
	atts, err := at.find.named(alloc, false)
	if err != nil {
		return nil, err
	}
	a := at.attaching(at.ownerOf(ctx), req, netns, false)
	for _, att := range atts {
		if err := a.preflight(att); err != nil {
			return nil, err
		}
	}
	logFound(at.logger, telemetry.OpSetup, req.id, len(atts), locked.Sub(start), time.Since(locked))
	return a.all(ctx, atts)
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

// withRetry runs att's ADD until it succeeds, fails permanently, runs
// out of attempts, or ctx is done.
func (a attaching) withRetry(ctx context.Context, att attachment, alongside bool) (*cni.Result, *types100.Result, error) {
	c, req, netns := a.attacher, a.req, a.netns
	driver := c.drivers.driverFor(att)
	var first error
	var waited time.Duration // before this attempt
	for attempt := 1; ; attempt++ {
		start := time.Now()
		addCtx, try := c.tel.StartAttempt(ctx, att.name(), att.ifName, attempt, waited)
		res, raw, err := driver.add(addCtx, req, att, netns)
		try.End(err)
		if err == nil {
			c.logger.Debug("network attached", "alloc_id", req.id, "network", att.name(), "attempt", attempt, "duration", time.Since(start))
			return res, raw, nil
		}
		c.logger.Warn("failed to attach network", "alloc_id", req.id, "network", att.name(), "attempt", attempt, "error", err, "duration", time.Since(start))
		if first == nil {
			first = err
		}
		if attempt >= c.retry.Attempts || isPermanent(err) || ctx.Err() != nil {
			return nil, nil, setupError(req.id, att.name(), attempt, first, err, ctx.Err())
		}
		// Without this DEL the retry cannot succeed: host-local already
		// reserved an address for this id and refuses a second ADD. The
		// force cleanup matters too: a failed ADD is not cached, so the
		// firewall plugin's DEL cannot know which address to clean.
		undo, fa := a.undoing(), foundAttachment{att: att, req: req}
		undo.others = alongside // the record stays for the next attempt: no forget
		how := undo.detach([]foundAttachment{fa})
		derr := undo.one(ctx, how, how.Leaving[0], fa)
		if derr != nil {
			c.logger.Warn("cleanup between attempts incomplete", "alloc_id", req.id, "network", att.name(), "attempt", attempt, "error", derr)
		}
		waitStart := time.Now()
		if werr := c.retry.wait(ctx, attempt); werr != nil {
			return nil, nil, setupError(req.id, att.name(), attempt, first, err, werr)
		}
		waited = time.Since(waitStart)
	}
}
