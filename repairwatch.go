package cninet

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
)

// The repair watcher (Config.RepairEvery) keeps the owner's live
// attachments whole by itself: a pass checks them all in one read of the
// host (firewall rules, reservations, cached results, whether each
// namespace still exists) and repairs each that lacks something, under
// its lock. A pass runs at start, every RepairEvery, and at once when the
// nf_tables ruleset changes (every change by nft, iptables-nft or
// firewalld arrives as a netlink notification; a burst — one flush is
// many messages — is one pass). It never fights: an attachment repaired
// maxRepairs times within fightWindow is reported and left alone until
// the window has passed.

// The watcher's pacing.
var (
	// settleQuiet is how long a burst of changes must pause before a
	// pass, and settleMax how long a pass waits at most for a busy
	// ruleset to pause.
	settleQuiet = 50 * time.Millisecond
	settleMax   = 250 * time.Millisecond
	// minPassGap spaces the passes changes trigger: a host whose
	// workloads come and go changes the ruleset all the time.
	minPassGap = 500 * time.Millisecond
	// fightWindow and maxRepairs say when a drift that keeps coming back
	// is reported instead of repaired.
	fightWindow = time.Minute
	maxRepairs  = 3
	// repairTimeout bounds one repair of the watcher's: its plugins'
	// ADDs and writes, while it holds the attachment's lock.
	repairTimeout = time.Minute
	// resubscribeDelay is the pause before watching the ruleset again
	// after the notifications stopped.
	resubscribeDelay = time.Second
)

// repairWatcher is Config.RepairEvery's goroutine.
type repairWatcher struct {
	c        *Configurator
	every    time.Duration
	anyOwner bool
	cancel   context.CancelFunc
	done     chan struct{}

	mu       sync.Mutex
	repairs  map[registry.Key][]time.Time // when each attachment's repair was tried, within fightWindow
	failed   map[registry.Key]string      // the error of its last repair, "" when it succeeded
	reported map[registry.Key]time.Time   // refused or not in place: reported once until then
	lost     map[registry.Key]time.Time   // found not repairable in place, as of the record's Updated
	backoff  map[registry.Key]backoff     // a repair left it missing pieces: not tried again before until
	passes   int                          // passes run (tests wait on it)
}

// startRepairWatcher starts c's watcher; stop ends it.
func startRepairWatcher(c *Configurator, every time.Duration, anyOwner bool) *repairWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &repairWatcher{c: c, every: every, anyOwner: anyOwner, cancel: cancel, done: make(chan struct{}),
		repairs: map[registry.Key][]time.Time{}, failed: map[registry.Key]string{}, backoff: map[registry.Key]backoff{}, reported: map[registry.Key]time.Time{}, lost: map[registry.Key]time.Time{}}
	go w.run(ctx)
	return w
}

// stop ends the watcher and waits for a pass under way to finish: after
// it returns, nothing repairs.
func (w *repairWatcher) stop() {
	w.cancel()
	<-w.done
}

func (w *repairWatcher) run(ctx context.Context) {
	defer close(w.done)
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	changes, retry := w.subscribe(ctx)
	w.pass(ctx, time.Time{})
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.pass(ctx, time.Time{})
			last = time.Now()
		case <-retry:
			changes, retry = w.subscribe(ctx)
		case _, ok := <-changes:
			if !ok {
				changes, retry = nil, time.After(resubscribeDelay)
				continue
			}
			first := time.Now()
			if !settle(ctx, changes, first) {
				return
			}
			if gap := minPassGap - time.Since(last); gap > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(gap):
				}
			}
			w.pass(ctx, first)
			last = time.Now()
		}
	}
}

// subscribe watches the nf_tables ruleset where the NFTables can; retry
// fires when it could not and should be tried again.
func (w *repairWatcher) subscribe(ctx context.Context) (changes <-chan struct{}, retry <-chan time.Time) {
	nft, err := w.c.seams.nftOpener.Get()
	if err != nil {
		if !errors.Is(err, host.ErrNFTablesMissing) {
			w.c.logger.Warn("repair watcher: nftables cannot be opened; repairing every RepairEvery only", "error", err)
		}
		return nil, nil
	}
	watcher, ok := nft.(host.NFTChangeWatcher)
	if !ok {
		return nil, nil
	}
	ch, err := watcher.WatchChanges(ctx)
	if err != nil {
		w.c.logger.Warn("repair watcher: cannot watch the nf_tables ruleset; trying again", "error", err)
		return nil, time.After(resubscribeDelay)
	}
	return ch, nil
}

// settle waits until changes pause for settleQuiet, or settleMax after
// first; false when ctx ended.
func settle(ctx context.Context, changes <-chan struct{}, first time.Time) bool {
	quiet := time.NewTimer(settleQuiet)
	defer quiet.Stop()
	deadline := time.NewTimer(settleMax - time.Since(first))
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-quiet.C:
			return true
		case <-deadline.C:
			return true
		case _, ok := <-changes:
			if !ok {
				return true
			}
			if !quiet.Stop() {
				<-quiet.C
			}
			quiet.Reset(settleQuiet)
		}
	}
}

// pass checks every live attachment the watcher keeps whole and repairs
// those that lack something; changed is when the change that triggered
// it was seen (zero for a periodic pass).
func (w *repairWatcher) pass(ctx context.Context, changed time.Time) {
	defer func() {
		w.mu.Lock()
		w.passes++
		w.mu.Unlock()
	}()
	atts := w.live()
	if len(atts) == 0 {
		return
	}
	lives := make([]*footprint.Live, len(atts))
	for i, ca := range atts {
		lives[i] = ca.live
	}
	checker := footprint.NewChecker(ctx, w.c.seams.all())
	checker.Shallow = true
	var drifting []checkedAttachment
	for i, h := range checker.Check(lives) {
		if len(h.Missing) > 0 && w.mayRepair(atts[i], h) {
			drifting = append(drifting, atts[i])
		}
	}
	for _, ca := range drifting {
		if ctx.Err() != nil {
			return
		}
		w.repair(ctx, ca, changed)
	}
}

// live returns the attachments the watcher keeps whole: those the
// registry records as attached, of its owner (or of any owner, on the
// networks this Configurator knows).
func (w *repairWatcher) live() []checkedAttachment {
	all, err := w.c.registry.store.All()
	if err != nil {
		w.c.logger.Warn("repair watcher: reading the host registry", "error", err)
	}
	var out []checkedAttachment
	for i := range all.Records {
		rec := &all.Records[i]
		if rec.State != registry.Attached || (rec.Owner != w.c.owner && !w.anyOwner) {
			continue
		}
		if _, err := w.c.nets.known(rec.Network, true); err != nil {
			continue // another Configurator's network
		}
		if ca, ok := w.c.checkedOfRecord(rec); ok {
			out = append(out, ca)
		}
	}
	return out
}

// checkedOfRecord is the live attachment rec records.
func (c *Configurator) checkedOfRecord(rec *registry.Record) (checkedAttachment, bool) {
	conf, err := c.registry.recordedConf(*rec)
	if err != nil {
		return checkedAttachment{}, false
	}
	fa := foundAttachment{att: attachment{conf: conf, ifName: rec.IfName, viaCNI: rec.ViaCNI},
		req: recordedRequest(request{id: rec.ContainerID, runtimeID: rec.RuntimeID}, *rec), cached: true, settled: true}
	return checkedAttachment{fa: fa, rec: rec, live: c.liveOf(fa, rec, "")}, true
}

// backoff is how long the watcher leaves an attachment alone after a
// repair that did not make it whole: doubled at each such repair, from
// fightWindow to maxBackoff, forgotten once a repair makes it whole.
type backoff struct {
	until time.Time
	wait  time.Duration
}

// maxBackoff bounds the pause after repairs that leave pieces missing.
var maxBackoff = time.Hour

// mayRepair reports whether the watcher repairs ca, which h found
// drifting: not when it cannot be repaired in place, nor when it was
// repaired maxRepairs times within fightWindow (both reported once).
func (w *repairWatcher) mayRepair(ca checkedAttachment, h footprint.Health) bool {
	key := ca.rec.Key()
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	recent := w.repairs[key][:0]
	for _, t := range w.repairs[key] {
		if now.Sub(t) < fightWindow {
			recent = append(recent, t)
		}
	}
	w.repairs[key] = recent
	a := ca.live
	switch {
	case w.lost[key].Equal(ca.rec.Updated) && !ca.rec.Updated.IsZero():
		return false // reported when found; its record has not changed since
	case now.Before(w.backoff[key].until):
		return false // its last repair left pieces missing: reported then
	case !h.InPlace():
		if _, done := w.reported[key]; !done {
			w.reported[key] = now
			w.c.logger.Error("repair watcher: attachment cannot be repaired in place: re-create the workload", "alloc_id", a.ID,
				"network", a.Network, "ifname", a.IfName, "missing", driftOf(h, nil).Missing)
			w.c.tel.countRepair(context.Background(), a.Network, outcomeNotInPlace)
		}
		return false
	case len(recent) >= maxRepairs:
		if at, done := w.reported[key]; !done || now.Sub(at) >= fightWindow {
			w.reported[key] = now
			msg := "repair watcher: drift keeps coming back: another program removes this attachment's rules; not repairing it for now"
			if w.failed[key] != "" {
				msg = "repair watcher: repair keeps failing; not trying it again for now"
			}
			w.c.logger.Error(msg, "alloc_id", a.ID, "network", a.Network, "ifname", a.IfName, "repairs", len(recent), "window", fightWindow,
				"missing", driftOf(h, nil).Missing, "last_error", w.failed[key])
			w.c.tel.countRepair(context.Background(), a.Network, outcomeRefused)
		}
		return false
	}
	delete(w.reported, key)
	return true
}

// repair repairs one attachment under its lock, if nobody holds it (a
// Teardown, a Check, another process's repair: the next pass sees what
// they left), and only while its record still says attached: nothing of
// an attachment being torn down, or gone, comes back.
func (w *repairWatcher) repair(ctx context.Context, ca checkedAttachment, changed time.Time) {
	c := w.c
	ctx, cancel := context.WithTimeout(ctx, repairTimeout) // a plugin that hangs holds the id no longer
	defer cancel()
	unlock, busy := c.registry.tryEnter(ca.rec.ContainerID)
	if busy {
		return
	}
	defer unlock()
	rec := c.registry.recorded(ca.rec.ContainerID, ca.rec.Network, ca.rec.IfName)
	if rec == nil || rec.State != registry.Attached || rec.Owner != ca.rec.Owner {
		return
	}
	fresh, ok := c.checkedOfRecord(rec)
	if !ok {
		return
	}
	result := c.driftCheck(ctx, []checkedAttachment{fresh}, true)[0]
	health, restored := []footprint.Health{result.health}, [][]footprint.Missing{result.repaired}
	key := rec.Key()
	w.mu.Lock()
	switch {
	case !health[0].InPlace():
		w.lost[key] = rec.Updated
	case len(restored[0]) > 0 || len(health[0].Missing) > 0:
		w.repairs[key] = append(w.repairs[key], time.Now())
		w.failed[key] = ""
		if len(restored[0]) == 0 { // the repair restored nothing: it failed
			w.failed[key] = driftOf(health[0], nil).String()
		}
	}
	if len(health[0].Missing) > 0 && health[0].InPlace() {
		// Not whole after its repair (a piece no repair brings back, a
		// plugin that fails): trying every pass would only repeat it.
		b := w.backoff[key]
		b.wait = min(max(2*b.wait, fightWindow), maxBackoff)
		b.until = time.Now().Add(b.wait)
		w.backoff[key] = b
		c.logger.Error("repair watcher: a repair left the attachment incomplete; trying it again later", "alloc_id", rec.ContainerID,
			"network", rec.Network, "ifname", rec.IfName, "still_missing", driftOf(health[0], nil).Missing, "error", result.err, "again_in", b.wait)
	} else {
		delete(w.backoff, key)
	}
	w.mu.Unlock()
	if health[0].Whole() && !changed.IsZero() {
		c.tel.repairedAfter(ctx, rec.Network, time.Since(changed))
	}
}

// passesRun is how many passes the watcher finished.
func (w *repairWatcher) passesRun() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.passes
}
