package repairwatch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/identity"
)

// The watcher's pacing.
var (
	// settleQuiet is how long a burst of changes must pause before a
	// pass, and settleMax how long a pass waits at most for a busy
	// ruleset to pause.
	settleQuiet = 50 * time.Millisecond
	settleMax   = 250 * time.Millisecond
	// minPassGap spaces the passes changes trigger: a host whose
	// workloads come and go changes the ruleset all the time (every
	// Teardown deletes rules). While those passes find nothing missing
	// the gap doubles, up to maxPassGap; one that finds drift brings it
	// back (nextPassGap).
	minPassGap = 500 * time.Millisecond
	maxPassGap = 2 * time.Second
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

// Config is what the watcher is asked to do.
type Config struct {
	// Every is the interval of its periodic passes (Config.RepairEvery),
	// positive.
	Every time.Duration
	// Owner is whose attachments it keeps whole; AnyOwner: everyone's,
	// on the networks the Configurator knows.
	Owner    string
	AnyOwner bool
	Logger   hclog.Logger
}

// Watcher is Config.RepairEvery's goroutine: New builds it, Start starts
// it, Stop ends it.
type Watcher struct {
	cfg    Config
	parts  Parts
	cancel context.CancelFunc
	done   chan struct{}
	passes atomic.Int64 // passes run (tests wait on it)

	mu       sync.Mutex
	repairs  map[identity.Key][]time.Time // when each attachment's repair was tried, within fightWindow
	failed   map[identity.Key]string      // the error of its last repair, "" when it succeeded
	reported map[identity.Key]time.Time   // refused or not in place: reported once until then
	lost     map[identity.Key]time.Time   // found not repairable in place, as of the record's Updated
	backoff  map[identity.Key]backoff     // a repair left it missing pieces: not tried again before until
	reopen   time.Time                    // when the first attachment refused for fighting may be repaired again
	// busy says a repair of the last pass found its id held (a Check, a
	// Teardown, another process): the watcher runs another pass soon
	// rather than at the next change or interval.
	busy atomic.Bool

	// The watcher's goroutine alone uses what follows. known is the
	// attachments the last pass built from their records: a record not
	// written since is not decoded into one again.
	known map[identity.Key]Attachment
	// watching says the nf_tables ruleset is watched; firewallFresh that
	// no change arrived since the last read of the firewall began;
	// firewallWhole the attachments that read found with their firewall
	// whole, as of their record's Updated. While all three hold for every
	// live attachment and the firewall is nf_tables' (iptables-nft, nft),
	// a periodic pass reads only the rest.
	watching, firewallFresh bool
	firewallWhole           map[identity.Key]time.Time
}

// New returns a watcher of what cfg says, through parts; Start starts
// it.
func New(cfg Config, parts Parts) *Watcher {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Watcher{cfg: cfg, parts: parts, done: make(chan struct{}),
		repairs: map[identity.Key][]time.Time{}, failed: map[identity.Key]string{}, backoff: map[identity.Key]backoff{},
		reported: map[identity.Key]time.Time{}, lost: map[identity.Key]time.Time{}, known: map[identity.Key]Attachment{}}
}

// Start starts the watcher's goroutine, once; Stop ends it.
func (w *Watcher) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.run(ctx)
}

// Stop ends the watcher and waits for a pass under way to finish: after
// it returns, nothing repairs.
func (w *Watcher) Stop() {
	if w.cancel == nil {
		return // never started
	}
	w.cancel()
	<-w.done
}

// Passes is how many passes the watcher finished.
func (w *Watcher) Passes() int { return int(w.passes.Load()) }

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	tick := time.NewTicker(w.cfg.Every)
	defer tick.Stop()
	changes, retry := w.subscribe(ctx)
	w.watching = changes != nil
	var last time.Time
	var again <-chan time.Time // a pass found an id held: run it again soon
	var againChanged time.Time
	var reopen <-chan time.Time // a refused attachment's window has passed
	passGap := minPassGap
	pass := func(changed time.Time) {
		drifted := w.pass(ctx, changed)
		last = time.Now()
		if !changed.IsZero() {
			passGap = nextPassGap(passGap, drifted)
		}
		if at := w.takeReopen(); !at.IsZero() {
			reopen = time.After(time.Until(at) + time.Millisecond)
		}
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
		case <-reopen:
			reopen = nil
			pass(time.Time{})
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
			if gap := passGap - time.Since(last); gap > 0 {
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

// nextPassGap is the gap before the next pass a change triggers, after
// one that found something missing (drifted) or not.
func nextPassGap(gap time.Duration, drifted bool) time.Duration {
	if drifted {
		return minPassGap
	}
	return min(max(2*gap, minPassGap), maxPassGap)
}

// subscribe watches the nf_tables ruleset where the NFTables can; retry
// fires when it could not and should be tried again.
func (w *Watcher) subscribe(ctx context.Context) (changes <-chan struct{}, retry <-chan time.Time) {
	nft, err := w.parts.NFTables()
	if err != nil {
		if !errors.Is(err, host.ErrNFTablesMissing) {
			w.cfg.Logger.Warn("repair watcher: nftables cannot be opened; repairing every RepairEvery only", "error", err)
		}
		return nil, nil
	}
	watcher, ok := nft.(host.NFTChangeWatcher)
	if !ok {
		return nil, nil
	}
	ch, err := watcher.WatchChanges(ctx)
	if err != nil {
		w.cfg.Logger.Warn("repair watcher: cannot watch the nf_tables ruleset; trying again", "error", err)
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
