package cninet

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
	// repairWorkers is how many attachments a pass repairs at once: a
	// repair is mostly the plugins' processes, one after the other (four
	// at once made a whole-table flush of 100 attachments whole again
	// about 15% sooner than one at a time on a loaded two-core host).
	repairWorkers = 4
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
	// busy says a repair of the last pass found its id held (a Check, a
	// Teardown, another process): the watcher runs another pass soon
	// rather than at the next change or interval.
	busy atomic.Bool

	// The watcher's goroutine alone uses what follows. known is the
	// attachments the last pass built from their records: a record not
	// written since is not decoded into one again.
	known map[registry.Key]checkedAttachment
	// watching says the nf_tables ruleset is watched; firewallFresh that
	// no change arrived since the last read of the firewall began;
	// firewallWhole the attachments that read found with their firewall
	// whole, as of their record's Updated. While all three hold for every
	// live attachment and the firewall is nf_tables' (iptables-nft, nft),
	// a periodic pass reads only the rest.
	watching, firewallFresh bool
	firewallWhole           map[registry.Key]time.Time
}

// startRepairWatcher starts c's watcher; stop ends it.
func startRepairWatcher(c *Configurator, every time.Duration, anyOwner bool) *repairWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &repairWatcher{c: c, every: every, anyOwner: anyOwner, cancel: cancel, done: make(chan struct{}),
		repairs: map[registry.Key][]time.Time{}, failed: map[registry.Key]string{}, backoff: map[registry.Key]backoff{}, reported: map[registry.Key]time.Time{}, lost: map[registry.Key]time.Time{},
		known: map[registry.Key]checkedAttachment{}}
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
	w.watching = changes != nil
	var last time.Time
	var again <-chan time.Time // a pass found an id held: run it again soon
	var againChanged time.Time
	pass := func(changed time.Time) {
		w.pass(ctx, changed)
		last = time.Now()
		if w.busy.Swap(false) {
			again, againChanged = time.After(minPassGap), changed
		}
	}
	pass(time.Time{})
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			pass(time.Time{})
		case <-again:
			again = nil
			pass(againChanged)
		case <-retry:
			changes, retry = w.subscribe(ctx)
			w.watching = changes != nil
			if w.watching { // what changed while nobody listened is unknown
				pass(time.Time{})
			}
		case _, ok := <-changes:
			w.firewallFresh = false
			if !ok {
				changes, retry, w.watching = nil, time.After(resubscribeDelay), false
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
			pass(first)
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
	checker := footprint.NewChecker(ctx, w.c.seams.all())
	checker.Shallow, checker.FirewallUnchanged = true, w.firewallKnown(atts)
	if !checker.FirewallUnchanged {
		w.firewallFresh = w.watching // a change from now on makes what this read finds stale
	}
	health := checker.Check(livesOf(atts))
	if !checker.FirewallUnchanged {
		w.firewallWhole = make(map[registry.Key]time.Time, len(atts))
		for i, h := range health {
			if h.FirewallWhole() {
				w.firewallWhole[atts[i].rec.Key()] = atts[i].rec.Updated
			}
		}
	}
	var drifting []checkedAttachment
	for i, h := range health {
		if len(h.Missing) > 0 && w.mayRepair(atts[i], h) && !w.held(atts[i]) {
			drifting = append(drifting, atts[i])
		}
	}
	if len(drifting) > 0 {
		w.repairAll(ctx, drifting, changed)
	}
}

// held reports whether another operation (a Setup finishing, a
// Teardown, a Check, another process) holds ca's id, noting it for a
// pass soon: what it finds missing may be that operation's work under
// way, and checking it again with the others drifting costs a read of
// the host for nothing.
func (w *repairWatcher) held(ca checkedAttachment) bool {
	leave, busy := w.c.registry.tryEnter(ca.rec.ContainerID)
	if busy {
		w.busy.Store(true)
		return true
	}
	leave()
	return false
}

// firewallKnown reports whether the firewall of atts is as the last read
// of it found it, whole: no nf_tables change arrived since that read
// began, the watch never lapsed, each of atts was whole in it as it is
// recorded now, and iptables' tables are nf_tables' (a change to
// iptables-legacy's arrives nowhere).
func (w *repairWatcher) firewallKnown(atts []checkedAttachment) bool {
	if !w.watching || !w.firewallFresh {
		return false
	}
	for _, ca := range atts {
		if at, ok := w.firewallWhole[ca.rec.Key()]; !ok || !at.Equal(ca.rec.Updated) {
			return false
		}
	}
	for _, v6 := range []bool{false, true} {
		ipt, err := w.c.seams.iptOpener.Get(v6)
		if err != nil {
			return false
		}
		if b, ok := ipt.(host.NFTablesBacked); !ok || !b.OnNFTables() {
			return false
		}
	}
	return true
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
	known := make(map[registry.Key]checkedAttachment, len(w.known))
	for i := range all.Records {
		rec := &all.Records[i]
		if rec.State != registry.Attached || (rec.Owner != w.c.owner && !w.anyOwner) {
			continue
		}
		if _, err := w.c.nets.Known(rec.Network, true); err != nil {
			continue // another Configurator's network
		}
		ca, ok := w.known[rec.Key()]
		if !ok || !ca.rec.Updated.Equal(rec.Updated) {
			if ca, ok = w.c.checkedOfRecord(rec); !ok {
				continue
			}
		}
		out = append(out, ca)
		if len(rec.ConfList) > 0 && len(rec.Result) > 0 { // all it is built from is in the record
			known[rec.Key()] = ca
		}
	}
	w.known = known
	w.forgetGone(all.Records, err)
	return out
}

// forgetGone drops what the watcher noted of attachments no longer
// recorded, so that a host that cycles through many workloads does not
// grow its maps for ever. A listing that failed forgets nothing: its
// records may be there still.
func (w *repairWatcher) forgetGone(records []registry.Record, listErr error) {
	if listErr != nil {
		return
	}
	recorded := make(map[registry.Key]bool, len(records))
	for i := range records {
		recorded[records[i].Key()] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.repairs {
		if !recorded[key] {
			delete(w.repairs, key)
		}
	}
	for _, m := range []map[registry.Key]time.Time{w.reported, w.lost} {
		for key := range m {
			if !recorded[key] {
				delete(m, key)
			}
		}
	}
	for key := range w.failed {
		if !recorded[key] {
			delete(w.failed, key)
		}
	}
	for key := range w.backoff {
		if !recorded[key] {
			delete(w.backoff, key)
		}
	}
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

// backoff is how long the watcher leaves an attachment alone after
// repairs that did not make it whole, the second in a row and each after
// it: doubled at each, from fightWindow to maxBackoff, forgotten once a
// repair makes it whole.
type backoff struct {
	until      time.Time
	wait       time.Duration
	incomplete int // repairs in a row that left pieces missing
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

// repairAll repairs drifting in one read of the host for them all, not
// one per attachment: a whole check of them (devices too: what cannot be
// restored in place is not tried), each one's repair under its own lock,
// then one check of those repaired.
func (w *repairWatcher) repairAll(ctx context.Context, drifting []checkedAttachment, changed time.Time) {
	c := w.c
	checker := footprint.NewChecker(ctx, c.seams.all())
	before := checker.Check(livesOf(drifting))
	results := make([]repairDone, len(drifting))
	ok := make([]bool, len(drifting))
	repairAt := func(i int) {
		if ctx.Err() == nil {
			results[i], ok[i] = w.repair(ctx, checker, drifting[i], before[i])
		}
	}
	// The first repair runs alone: it restores the chains the plugins
	// share, which two plugins' ADDs would race to create (one failing).
	// Unless it restored all it found missing, the others run one at a
	// time too.
	repairAt(0)
	workers := repairWorkers
	if !ok[0] || len(results[0].restored) < len(results[0].before.Missing) {
		workers = 1
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(drifting)-1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				repairAt(i)
			}
		}()
	}
	for i := 1; i < len(drifting); i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	var done []repairDone
	for i := range results {
		if ok[i] {
			done = append(done, results[i])
		}
	}
	if len(done) == 0 || ctx.Err() != nil {
		return
	}
	repaired := make([]checkedAttachment, len(done))
	for i, d := range done {
		repaired[i] = d.ca
	}
	for i, after := range footprint.NewChecker(ctx, c.seams.all()).Check(livesOf(repaired)) {
		w.account(ctx, done[i], after, changed)
	}
}

// repairDone is one repair a pass ran: of which attachment, as which
// record, what it restored, why not the rest, and when it began and
// ended.
type repairDone struct {
	ca        checkedAttachment
	rec       *registry.Record
	before    footprint.Health
	restored  []footprint.Missing
	err       error
	start, at time.Time
}

// repair repairs one attachment under its lock, from h (what the pass's
// check found missing), if nobody holds it (a Teardown, a Check, another
// process's repair: the next pass sees what they left), and only while
// its record still says attached: nothing of an attachment being torn
// down, or gone, comes back. A record changed since the pass read it is
// checked again alone first. Each restore adds only what is missing at
// the time it writes, so what another program restored meanwhile is not
// written twice.
func (w *repairWatcher) repair(ctx context.Context, checker *footprint.Checker, ca checkedAttachment, h footprint.Health) (repairDone, bool) {
	c := w.c
	ctx, cancel := context.WithTimeout(ctx, repairTimeout) // a plugin that hangs holds the id no longer
	defer cancel()
	unlock, busy := c.registry.tryEnter(ca.rec.ContainerID)
	if busy {
		w.busy.Store(true)
		return repairDone{}, false
	}
	defer unlock()
	rec := c.registry.recorded(ca.rec.ContainerID, ca.rec.Network, ca.rec.IfName)
	if rec == nil || rec.State != registry.Attached || rec.Owner != ca.rec.Owner {
		return repairDone{}, false
	}
	if !rec.Updated.Equal(ca.rec.Updated) {
		fresh, ok := c.checkedOfRecord(rec)
		if !ok {
			return repairDone{}, false
		}
		ca, checker = fresh, footprint.NewChecker(ctx, c.seams.all())
		h = checker.Check([]*footprint.Live{fresh.live})[0]
	}
	if len(h.Missing) == 0 {
		return repairDone{}, false
	}
	start := time.Now()
	restored, err := c.repairOne(ctx, checker, ca, h)
	return repairDone{ca: ca, rec: rec, before: h, restored: restored, err: err, start: start, at: time.Now()}, true
}

// account notes a repair the pass ran, after is the attachment's health
// after it, and logs it: one found not repairable in place is not tried
// again until its record changes; a repair counts towards the fight
// limit, as failed when it restored nothing; one that left pieces
// missing is backed off; the time from the change to the repair is
// recorded when the attachment is whole.
func (w *repairWatcher) account(ctx context.Context, d repairDone, after footprint.Health, changed time.Time) {
	c := w.c
	result := driftResult{health: after, err: d.err, repaired: stillRestored(d.restored, after)}
	c.logRepair(d.ca.live, result, d.at.Sub(d.start))
	key := d.rec.Key()
	w.mu.Lock()
	switch {
	case !d.before.InPlace():
		w.lost[key] = d.rec.Updated
	default:
		w.repairs[key] = append(w.repairs[key], d.at)
		w.failed[key] = ""
		if len(d.restored) == 0 { // the repair restored nothing: it failed
			w.failed[key] = driftOf(after, nil).String()
		}
	}
	if len(after.Missing) > 0 && after.InPlace() {
		// Not whole after two repairs in a row (a piece no repair brings
		// back, a plugin that fails): trying every pass would only repeat
		// it. One such repair alone may have met a flush halfway.
		b := w.backoff[key]
		if b.incomplete++; b.incomplete >= 2 {
			b.wait = min(max(2*b.wait, fightWindow), maxBackoff)
			b.until = time.Now().Add(b.wait)
			c.logger.Error("repair watcher: a repair left the attachment incomplete; trying it again later", "alloc_id", d.rec.ContainerID,
				"network", d.rec.Network, "ifname", d.rec.IfName, "still_missing", driftOf(after, nil).Missing, "error", d.err, "again_in", b.wait)
		}
		w.backoff[key] = b
	} else {
		delete(w.backoff, key)
	}
	w.mu.Unlock()
	if after.Whole() && !changed.IsZero() {
		c.tel.repairedAfter(ctx, d.rec.Network, d.at.Sub(changed))
	}
}

// livesOf is the live attachments of atts.
func livesOf(atts []checkedAttachment) []*footprint.Live {
	out := make([]*footprint.Live, len(atts))
	for i, ca := range atts {
		out[i] = ca.live
	}
	return out
}

// passesRun is how many passes the watcher finished.
func (w *repairWatcher) passesRun() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.passes
}
