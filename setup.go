package cninet

import (
	"context"
	"errors"
	"fmt"
	"time"

	cni "github.com/containerd/go-cni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// attacher is Setup, and makes the attachings of Connect: the parts an attach uses, and the detacher
// of its rollback.
type attacher struct {
	requests
	attachments.Owners
	find     *attachments.Finder
	registry *attachments.Registry
	plugins  *catalog.Plugins
	drivers  *attachments.Drivers
	tel      *telemetry.Recorder
	logger   hclog.Logger
	retry    RetryPolicy // Config.Retry, its defaults applied
	detacher *attachments.Detacher
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
	leave, err := at.registry.Enter(ctx, req.ID, true)
	if err != nil {
		return nil, err
	}
	defer leave()
	locked := time.Now()
	atts, err := at.find.Named(req, false)
	if err != nil {
		return nil, err
	}
	a := at.attaching(at.OwnerOf(ctx), req, netns, false)
	for _, att := range atts {
		if err := a.preflight(att); err != nil {
			return nil, err
		}
	}
	attachments.LogFound(at.logger, telemetry.OpSetup, req.ID, len(atts), locked.Sub(start), time.Since(locked))
	return a.all(ctx, atts)
}

// attaching is one Setup or Connect of a workload: the networks it
// attaches, each recorded before its ADD, retried, and all rolled back
// when one fails.
type attaching struct {
	*attacher
	owner  string // whose the records are
	req    attachments.Request
	netns  string
	others bool // the workload keeps attachments besides those attached (Connect)
	// anyResult accepts a result without an address (an L2-only network):
	// the caller, a CNI runtime, reads the result itself (Connect with
	// ConnectOptions.IfName).
	anyResult bool
	// loUp: the workload's lo was up before (attachments.KeepLoopback); a DEL that
	// undoes this attachment leaves the loopback plugin out.
	loUp bool
}

// attaching starts an attachment of req's workload in netns for owner.
func (at *attacher) attaching(owner string, req attachments.Request, netns string, others bool) attaching {
	return attaching{attacher: at, owner: owner, req: req, netns: netns, others: others}
}

// undoing is the detachment that undoes a's attachments: a rollback, the
// DEL between attempts.
func (a attaching) undoing() attachments.Detachment {
	d := a.detacher.Detaching(a.owner, a.netns, a.others)
	d.Rollback, d.LoUp = true, a.loUp
	return d
}

// preflight fails before anything runs when a plugin of att's network
// that cninet would run is missing, or a registry file this cninet
// cannot read stands where att's record belongs (ErrRecordUnreadable).
func (a attaching) preflight(att attachments.Attachment) error {
	if err := a.registry.RefuseUnreadable(a.req.ID, att.Name(), att.IfName); err != nil {
		return err
	}
	if !a.drivers.DriverFor(att).RunsPlugins() {
		return nil // an injected cni.CNI finds its plugins itself
	}
	return a.plugins.Check(att.Conf)
}

// all attaches atts concurrently, all or nothing (see Setup), and
// returns their statuses in the order of atts. With others, a rollback
// takes only atts away, and no DEL may reach the others (see
// attachments.Detachment.One).
func (a attaching) all(ctx context.Context, atts []attachments.Attachment) (*NetworkStatus, error) {
	req := a.req
	alongside := a.others || len(atts) > 1
	sts := make([]*NetworkStatus, len(atts))
	attempts := make([]error, len(atts))
	attachCtx, cancel := context.WithCancel(ctx)
	attachments.EachNetwork(len(atts), func(i int) {
		if err := attachCtx.Err(); err != nil { // another network failed before this one started
			attempts[i] = fmt.Errorf("%w: allocation %s in network %q: not attempted: %w", ErrSetupFailed, req.ID, atts[i].Name(), err)
			return
		}
		if sts[i], attempts[i] = a.one(attachCtx, atts[i], alongside); attempts[i] != nil {
			cancel() // the others' ADDs are pointless now: all or nothing
		}
	})
	cancel() // every ADD returned: nothing is still adding when the rollback runs
	if failed := setupFailures(ctx, attempts); failed != nil {
		if rerr := a.rollback(ctx, atts); rerr != nil {
			failed = fmt.Errorf("%w; rollback incomplete, Teardown the allocation to finish it: %w", failed, rerr)
		}
		return nil, failed
	}
	status := &NetworkStatus{}
	for i, att := range atts {
		status.add(att.Name(), sts[i])
	}
	return status, nil
}

// setupFailures joins the errors of the networks that failed, in the
// allocation's order. A network whose ADD was only cancelled because
// another one failed did not fail itself and is left out, unless the
// caller's ctx is done: then that is every network's failure.
func setupFailures(ctx context.Context, attempts []error) error {
	var failed, cancelled []error
	for _, err := range attempts {
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
	return errs.Join(failed)
}

// one adds one network, with retries, and reads its status.
func (a attaching) one(ctx context.Context, att attachments.Attachment, alongside bool) (_ *NetworkStatus, err error) {
	c, req := a.attacher, a.req
	ctx, op := c.tel.StartNetwork(ctx, telemetry.OpAttach, att.Name(), att.IfName, req.ID, a.netns)
	defer func() { op.End(err) }()
	recordStart := time.Now()
	rec, err := c.registry.RecordAdding(a.owner, req, att, a.netns)
	if err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: recording the attachment before its ADD: %w", ErrSetupFailed, req.ID, att.Name(), err)
	}
	recorded := time.Since(recordStart)
	res, raw, err := a.withRetry(ctx, att, alongside)
	if err != nil {
		return nil, err
	}
	recordStart = time.Now()
	if err := c.registry.RecordAttached(rec, res, raw); err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: %w", ErrSetupFailed, req.ID, att.Name(), err)
	}
	c.logger.Debug("attachment recorded", "alloc_id", req.ID, "network", att.Name(), "record", recorded+time.Since(recordStart))
	st, err := StatusFromResult(res)
	if err != nil && a.anyResult && res != nil && errors.Is(err, ErrNoAddress) {
		return &NetworkStatus{IfName: att.IfName, DNS: dnsFromResult(res)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: allocation %s in network %q: %w", ErrSetupFailed, req.ID, att.Name(), err)
	}
	return st, nil
}

// rollback removes what a failed Setup attached: every network of the
// allocation, the ones that failed and the ones cancelled halfway
// included (DEL is idempotent). It runs on its own deadline: the caller's
// context may be the very reason Setup failed; only its values (the
// trace) carry over. What it could not remove (a held xtables lock, say)
// is left for a Teardown, and its error says so.
func (a attaching) rollback(ctx context.Context, atts []attachments.Attachment) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	found := make([]attachments.Found, len(atts))
	for i, att := range atts {
		found[i] = attachments.Found{Att: att, Req: a.req}
	}
	ctx, span := a.tel.StartSpan(ctx, telemetry.SpanRollback)
	err := a.undoing().All(ctx, found)
	span.End(err)
	if err != nil {
		a.logger.Error("rollback of failed setup incomplete", "alloc_id", a.req.ID, "error", err)
	}
	return err
}

var rollbackTimeout = 30 * time.Second // a variable only for tests: a rollback behind a held lock waits it out

// withRetry runs att's ADD until it succeeds, fails permanently, runs
// out of attempts, or ctx is done.
func (a attaching) withRetry(ctx context.Context, att attachments.Attachment, alongside bool) (*cni.Result, *types100.Result, error) {
	c, req, netns := a.attacher, a.req, a.netns
	driver := c.drivers.DriverFor(att)
	var first error
	var waited time.Duration // before this attempt
	for attempt := 1; ; attempt++ {
		start := time.Now()
		addCtx, try := c.tel.StartAttempt(ctx, att.Name(), att.IfName, attempt, waited)
		res, raw, err := driver.Add(addCtx, req, att, netns)
		try.End(err)
		if err == nil {
			c.logger.Debug("network attached", "alloc_id", req.ID, "network", att.Name(), "attempt", attempt, "duration", time.Since(start))
			return res, raw, nil
		}
		c.logger.Warn("failed to attach network", "alloc_id", req.ID, "network", att.Name(), "attempt", attempt, "error", err, "duration", time.Since(start))
		if first == nil {
			first = err
		}
		if attempt >= c.retry.Attempts || isPermanent(err) || ctx.Err() != nil {
			return nil, nil, setupError(req.ID, att.Name(), attempt, first, err, ctx.Err())
		}
		// Without this DEL the retry cannot succeed: host-local already
		// reserved an address for this id and refuses a second ADD. The
		// force cleanup matters too: a failed ADD is not cached, so the
		// firewall plugin's DEL cannot know which address to clean.
		undo, fa := a.undoing(), attachments.Found{Att: att, Req: req}
		undo.Others = alongside // the record stays for the next attempt: no forget
		how := undo.Detach([]attachments.Found{fa})
		derr := undo.One(ctx, how, how.Leaving[0], fa)
		if derr != nil {
			c.logger.Warn("cleanup between attempts incomplete", "alloc_id", req.ID, "network", att.Name(), "attempt", attempt, "error", derr)
		}
		waitStart := time.Now()
		if werr := c.retry.wait(ctx, attempt); werr != nil {
			return nil, nil, setupError(req.ID, att.Name(), attempt, first, err, werr)
		}
		waited = time.Since(waitStart)
	}
}
