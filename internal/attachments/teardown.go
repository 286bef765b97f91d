package attachments

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/hostwork"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// Detacher is Teardown, and makes the detachments of every other
// detach: the parts a detach uses.
type Detacher struct {
	Owners
	Find     *Finder
	Registry *Registry
	Seams    *Seams
	Drivers  *Drivers
	Tel      *telemetry.Recorder
	Logger   hclog.Logger
}

// Teardown is Teardown of req's allocation: its attachments found under
// its lock, then detached in one pass (All).
func (dt *Detacher) Teardown(ctx context.Context, req Request, netns string) error {
	start := time.Now()
	leave, err := dt.Registry.Enter(ctx, req.ID, false)
	if err != nil {
		return err
	}
	defer leave()
	locked := time.Now()
	owner := dt.OwnerOf(ctx)
	found, unreadable, err := dt.Find.Of(req, owner, true)
	if err != nil {
		return err
	}
	LogFound(dt.Logger, telemetry.OpTeardown, req.ID, len(found), locked.Sub(start), time.Since(locked))
	d := dt.Detaching(owner, netns, len(unreadable) > 0) // an unreadable record's attachment stays: the workload keeps it
	d.Settled = true
	return errs.Join([]error{d.All(ctx, found), UnreadableError(req.ID, unreadable)})
}

// LogFound reports, before an operation's first plugin runs, how long it
// waited for the allocation's locks and how long finding its attachments
// took (for Setup: resolving and checking the networks): with the
// per-network lines, every phase of the operation is timed.
func LogFound(logger hclog.Logger, op telemetry.Operation, id string, networks int, lock, find time.Duration) {
	logger.Debug("attachments found", "alloc_id", id, "operation", op.String(), "networks", networks, "lock", lock, "find", find)
}

// Detachment is one detach of found attachments of a workload: per
// network, the prevention, the DEL, the force cleanup, and the record's
// removal once nothing is left. Its fields say how the detach is made;
// what that lets each DEL run, the footprint package decides
// (footprint.Detach).
type Detachment struct {
	*Detacher
	owner  string // whose proofs a detach records
	netns  string
	Others bool // the workload keeps attachments besides those detached
	// Exact: the caller named the one attachment detached (Disconnect
	// with ConnectOptions.IfName); others may exist unseen, yet portmap's
	// DEL runs when the host shows its rules are this one's
	// (footprint.Detach.Exact).
	Exact bool
	// Settled: the caller detaches what an earlier call attached
	// (Teardown, Disconnect), not what a failing call is rolling back.
	// For an attachment whose ADD returned (Found.Settled) no
	// plugin can then still be writing, and the cleanup after the DEL
	// looks up by handle the nftables rules the prevention saw
	// (footprint.Cleaner.RecheckByHandle).
	Settled bool
	// Rollback: the detachment undoes what a failing Setup or Connect
	// attached (its rollback, the DEL between ADD attempts), so its
	// cleanups count as Setup's (cleanupOp).
	Rollback bool
	// LoUp: the workload's lo was up before this detachment, which leaves
	// the workload other networks (KeepLoopback). The loopback plugin is
	// then left out of the DELs (footprint.Detach.LoopbackUp): its DEL
	// only sets lo down, which would cut the workload's own localhost
	// traffic until lo is up again.
	LoUp bool
}

// Detaching starts a detachment for owner in netns; others says the
// workload keeps attachments besides those detached (Disconnect, a
// Connect rolled back).
func (dt *Detacher) Detaching(owner, netns string, others bool) Detachment {
	return Detachment{Detacher: dt, owner: owner, netns: netns, Others: others}
}

// cleanupOp is the operation d's cleanups count under in
// cninet.cleanup.removed: Setup's for a rollback, else Teardown's.
func (d Detachment) cleanupOp() telemetry.Operation {
	if d.Rollback {
		return telemetry.OpSetup
	}
	return telemetry.OpTeardown
}

// All detaches found, in one pass: how the detach is made (Detach), the
// whole workload's prevention and DEL first (hostportsFirst), then each
// network concurrently (one: prevent, DEL, clean) and, once nothing of
// it is left, its record forgotten. One network's failure does not stop
// the others; the errors are joined the last network first.
func (d Detachment) All(ctx context.Context, found []Found) error {
	how := d.Detach(found)
	d.hostportsFirst(ctx, how, found)
	results := make([]error, len(found))
	EachNetwork(len(found), func(i int) {
		if results[i] = d.One(ctx, how, how.Leaving[i], found[i]); results[i] == nil {
			results[i] = d.Registry.forget(found[i].Req.ID, found[i].Att) // nothing left: the record goes
		}
	})
	var failed []error
	for i := len(results) - 1; i >= 0; i-- {
		if results[i] != nil {
			failed = append(failed, results[i])
		}
	}
	return errs.Join(failed)
}

// Detach is how d detaches found, as the prevention decides by it
// (footprint.Detach).
func (d Detachment) Detach(found []Found) footprint.Detach {
	how := footprint.Detach{Others: d.Others, Exact: d.Exact, LoopbackUp: d.LoUp, Leaving: make([]footprint.Leaving, len(found))}
	for i, fa := range found {
		how.Leaving[i] = footprint.Leaving{
			Network:      d.Seams.Network(fa.Att.Conf, fa.Att.IfName, nil),
			ID:           fa.Req.ID,
			PortMappings: fa.Att.Conf.Info.PortMappings && len(fa.Req.Mappings) > 0,
			WholeChain:   !d.Drivers.canOmit(fa.Att),
		}
	}
	return how
}

// hostportsFirst runs, where the whole detach's prevention says so
// (footprint.Detach.PreventWorkload: a whole workload leaving several
// networks), portmap's nftables DEL alone, once, before the networks are
// detached: that DEL deletes every hostport rule carrying the container
// id, on every network. Whatever it does not remove, the force cleanup
// removes by proof; its failure is only logged.
func (d Detachment) hostportsFirst(ctx context.Context, how footprint.Detach, found []Found) {
	c := d.Detacher
	p := how.PreventWorkload(ctx, c.Seams.All)
	if p.Hostports.NotOwn() {
		c.Logger.Debug("portmap's nftables DEL left out: rules of the same container id are not the leaving attachments'",
			"alloc_id", found[0].Req.ID, "error", p.Hostports.Err)
	}
	first := p.HostportsFirst
	if first == nil {
		return
	}
	i := slices.IndexFunc(found, func(fa Found) bool {
		return fa.Att.Name() == first.Network.Name && fa.Att.IfName == first.Network.IfName && fa.Req.ID == first.ID
	})
	fa := found[i]
	ctx, span := c.Tel.StartSpan(ctx, telemetry.SpanDel)
	err := c.Drivers.DriverFor(fa.Att).Del(ctx, fa.Req, fa.Att, d.netns, footprint.HostportsAlone)
	span.End(err)
	if err != nil {
		c.Logger.Warn("portmap's DEL of a leaving workload failed; the force cleanup removes its rules where it can prove them",
			"alloc_id", fa.Req.ID, "network", fa.Att.Name(), "error", err)
	}
}

// One is one network's detach (fa, as it leaves: l), by the prevention
// rule: prevent (the cleaner makes sure the DEL cannot reach another
// attachment's state, and decides which plugins it runs:
// footprint.Cleaner.Prevent with how the detach is made), DEL, clean (the
// force cleanup removes what the DEL did not, by the ownership rule).
// When the prevention cannot be made (a file that cannot be read or
// written), the DEL is withheld and only the force cleanup runs: the
// error says so, and a later Teardown finishes. A failed DEL is only
// logged when the cleanup then removed everything: what matters is that
// nothing is left.
func (d Detachment) One(ctx context.Context, how footprint.Detach, l footprint.Leaving, fa Found) (err error) {
	c, req, att := d.Detacher, fa.Req, fa.Att
	ctx, op := c.Tel.StartNetwork(ctx, telemetry.OpDetach, att.Name(), att.IfName, req.ID, d.netns)
	defer func() { op.End(err) }()
	start := time.Now()
	proofs := &recordProofs{reg: c.Registry, owner: d.owner, fa: Found{Att: att, Req: req}}
	cl := c.Seams.cleaner(ctx, l.Network, proofs)
	cl.RecheckByHandle = d.Settled && fa.Settled
	cl.Detach = how
	var removeErr error
	var preventTries, cleanTries int
	prevention, preventErr := WhileLockHeld(ctx, func() (footprint.Prevention, error) {
		preventTries++
		return cl.Prevent([]string{req.ID}) // also reads the proof the DEL erases
	})
	preventSpent := cl.TakeSpent()
	if preventErr == nil {
		preventErr = proofs.detaching()
	}
	prevented := time.Now()
	if preventErr == nil {
		d.logPrevented(req.ID, att.Name(), prevention)
		delCtx, delSpan := c.Tel.StartSpan(ctx, telemetry.SpanDel)
		removeErr = c.Drivers.DriverFor(att).Del(delCtx, req, att, d.netns, prevention.Filter())
		delSpan.End(removeErr)
	} else {
		preventErr = fmt.Errorf("%w in network %q: DEL withheld, since it could not be kept from other attachments' state: %w",
			errs.CleanupFailed, att.Name(), preventErr)
	}
	delDone := time.Now()
	_, cleanSpan := c.Tel.StartSpan(ctx, telemetry.SpanCleanup)
	removed, cleanErr := WhileLockHeld(ctx, func() ([]footprint.Item, error) {
		cleanTries++
		return cl.Clean([]string{req.ID})
	})
	c.Tel.Cleaned(ctx, cleanSpan, d.cleanupOp(), att.Name(), removed, cleanErr)
	d.logRemoved(req.ID, att.Name(), removed, removeErr)
	// prevent includes record: the registry's share, writing the proof
	// before the DEL.
	c.Logger.Debug("network detached", "alloc_id", req.ID, "network", att.Name(),
		"prevent", prevented.Sub(start), "del", delDone.Sub(prevented), "cleanup", time.Since(delDone), "record", proofs.spent)
	d.logSpent(req.ID, att.Name(), "prevent", preventTries, preventSpent)
	d.logSpent(req.ID, att.Name(), "cleanup", cleanTries, cl.TakeSpent())
	if cleanErr != nil {
		cleanErr = fmt.Errorf("%w in network %q: %w", errs.CleanupFailed, att.Name(), cleanErr)
	}
	if err := errors.Join(preventErr, cleanErr); err != nil {
		if removeErr != nil {
			return fmt.Errorf("teardown of allocation %s: DEL: %w; %w", req.ID, removeErr, err)
		}
		return fmt.Errorf("teardown of allocation %s: %w", req.ID, err)
	}
	if removeErr != nil {
		c.Logger.Warn("CNI DEL failed; force cleanup removed what was left", "alloc_id", req.ID, "network", att.Name(), "error", removeErr)
	}
	return nil
}

// logSpent reports where one phase of a network's detach (the
// prevention, the cleanup) spent its time on the host: its reads and
// writes by kind, counted and timed, and how often it ran (a step that
// met a held xtables lock runs again: WhileLockHeld).
func (d Detachment) logSpent(id, network, phase string, tries int, s hostwork.Spent) {
	args := append([]any{"alloc_id", id, "network", network, "phase", phase, "tries", tries}, s.LogArgs()...)
	d.Logger.Debug("host work timed", args...)
}

// logPrevented reports what a DEL was kept from: addresses withheld from
// the cached result, plugins left out (the loopback plugin, kept from no
// one's state, is not named).
func (d Detachment) logPrevented(id, network string, p footprint.Prevention) {
	if p.Hostports.NotOwn() {
		d.Logger.Debug("portmap's nftables DEL left out: hostport rules of the same container id are not the attachment's",
			"alloc_id", id, "network", network, "error", p.Hostports.Err)
	}
	if len(p.Withheld) == 0 && len(p.Omit) == 0 {
		return
	}
	var withheld []string
	for _, addrs := range p.Withheld {
		for _, a := range addrs {
			withheld = append(withheld, a.String())
		}
	}
	d.Logger.Debug("DEL kept from other attachments' state: the force cleanup removes the rest by proof",
		"alloc_id", id, "network", network, "withheld_addresses", withheld, "plugins_left_out", p.Omit)
}

// logRemoved reports what the plugins left behind and cleanup removed.
func (d Detachment) logRemoved(id, network string, removed []footprint.Item, delErr error) {
	if len(removed) == 0 {
		return
	}
	items := make([]string, len(removed))
	for i, it := range removed {
		items[i] = it.Detail
	}
	d.Logger.Warn("removed state the CNI plugins left behind", "alloc_id", id, "network", network, "del_error", delErr, "items", items)
}

// lockRetryPause is the pause before a cleanup step that met a held
// xtables lock runs again: short, since each iptables command of the
// step waits for the lock itself (-w) until the context's deadline, and
// the step failed only because that wait, in whole seconds, ran out
// before the deadline did; jittered so that the steps of concurrent
// Teardowns that failed together do not queue again together.
const lockRetryPause = 50 * time.Millisecond

// WhileLockHeld runs step until it succeeds, fails on anything but a
// held xtables lock (iptables.LockWaitRanOut), or ctx's deadline is too
// close for another try. A busy host's other writers (kube-proxy, a
// firewall manager) take the lock in bursts: a step that missed a gap
// while its caller still had time waits for the next one rather than
// report the rules it could not reach as left behind. Without a deadline
// the step is not repeated: its commands' lock waits together were
// already bounded by host.DefaultLockWait. The step must be safe to run
// again: every cleanup step is, as a command that did not have the lock
// changed nothing.
func WhileLockHeld[T any](ctx context.Context, step func() (T, error)) (T, error) {
	deadline, bounded := ctx.Deadline()
	for {
		v, err := step()
		if !bounded || !iptables.LockWaitRanOut(err) {
			return v, err
		}
		pause := lockRetryPause/2 + rand.N(lockRetryPause/2+1)
		if time.Until(deadline) <= pause {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(pause):
		}
	}
}

// EachNetwork runs fn(i) for i in [0, n) concurrently and returns when
// all have returned; a single network runs without a goroutine. No DEL
// cninet runs can reach another network's state (the prevention rule,
// see Detachment.One), so networks attach and detach in parallel.
func EachNetwork(n int, fn func(i int)) {
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
