package repairwatch

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

// fakeParts is a Configurator's parts as the watcher sees them, in
// memory: records, what the host lacks of each attachment, the ids
// another operation holds, and a ruleset whose changes a test signals.
type fakeParts struct {
	mu       sync.Mutex
	records  []registry.Record
	missing  map[identity.Key][]footprint.Missing // what the host lacks of each now
	held     map[string]bool
	repaired map[identity.Key]int // repairs run of each
	reads    int                  // checks run: reads of the host
	refused  []string             // Refused's calls: "network not-in-place" or "network refused"
	// restore is what a repair of key restores of h; nil: all of it.
	restore func(key identity.Key, h footprint.Health) []footprint.Missing
	// afterRepair runs after each repair, as another program would.
	afterRepair func(key identity.Key)
	// batching makes RestoreRules write the iptables pieces of every
	// attachment but those unbatchable names; batches are the keys each
	// call wrote for, and unlocked those it was handed without their
	// lock held.
	batching    bool
	unbatchable map[string]bool
	batches     [][]identity.Key
	unlocked    []string
	entered     map[string]int // ids whose lock the watcher holds now
	// afterCheck runs after each check, with how many ran.
	afterCheck func(reads int)

	nft ruleset
}

var _ Parts = (*fakeParts)(nil)

// ruleset is the host's nftables as the watcher uses it: change signals
// on the channel of the last WatchChanges, which fails while failing is
// set.
type ruleset struct {
	host.NFTables
	failing atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
	watches int
}

// stop closes the channel of the last WatchChanges, as netlink does when
// the notifications stop.
func (r *ruleset) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.ch)
	r.ch = nil
}

func (r *ruleset) watching() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ch != nil
}

func (r *ruleset) WatchChanges(ctx context.Context) (<-chan struct{}, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watches++
	if r.failing.Load() {
		return nil, errors.New("netlink: joining the nf_tables notifications: no buffer space")
	}
	r.ch = make(chan struct{}, 1)
	return r.ch, nil
}

// signal sends a change signal, as one nf_tables change does; false
// when nobody watches.
func (r *ruleset) signal() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		return false
	}
	select {
	case r.ch <- struct{}{}:
	default:
	}
	return true
}

func newFakeParts() *fakeParts {
	return &fakeParts{missing: map[identity.Key][]footprint.Missing{}, held: map[string]bool{}, repaired: map[identity.Key]int{}}
}

// attach records id as attached in network "w" as eth0, whole.
func (f *fakeParts) attach(id string) identity.Key {
	key := identity.Key{Network: "w", ID: id, IfName: "eth0"}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records = append(f.records, registry.Record{Owner: "runner", Key: key, State: registry.Attached, Updated: time.Now(),
		ConfList: []byte(`{}`), Result: []byte(`{}`)})
	return key
}

// forget removes key's record, as a Teardown does.
func (f *fakeParts) forget(key identity.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records = slices.DeleteFunc(f.records, func(r registry.Record) bool { return r.Key == key })
}

// drift makes the host lack a rule of key, restorable (in place or not).
func (f *fakeParts) drift(key identity.Key, inPlace bool) {
	m := footprint.Missing{Plugin: "portmap", Backend: "iptables", Kind: "rule", Detail: "nat CNI-HOSTPORT-DNAT: jump", Restore: footprint.ByPlugin}
	if !inPlace {
		m.Restore, m.Why = footprint.NotInPlace, "the namespace is gone"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.missing[key] = []footprint.Missing{m}
}

func (f *fakeParts) repairsOf(key identity.Key) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.repaired[key]
}

func (f *fakeParts) readsRun() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeParts) Records() ([]registry.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.records), nil
}

func (f *fakeParts) Recorded(key identity.Key) *registry.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.records {
		if r.Key == key {
			return &r
		}
	}
	return nil
}

func (f *fakeParts) Knows(network string) bool { return network == "w" }

func (f *fakeParts) Attachment(rec *registry.Record) (Attachment, bool) {
	key := rec.Key
	live := &footprint.Live{Attachment: footprint.Attachment{Network: key.Network, ID: key.ID}, IfName: key.IfName}
	return Attachment{Record: rec, Live: live, Repair: func(_ context.Context, _ Checker, h footprint.Health) ([]footprint.Missing, error) {
		f.mu.Lock()
		f.repaired[key]++
		restored := h.Missing
		if f.restore != nil {
			restored = f.restore(key, h)
		}
		f.missing[key] = slices.DeleteFunc(slices.Clone(f.missing[key]), func(m footprint.Missing) bool { return slices.Contains(restored, m) })
		after := f.afterRepair
		f.mu.Unlock()
		if after != nil {
			after(key)
		}
		return restored, nil
	}}, true
}

func (f *fakeParts) TryEnter(id string) (func(), bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held[id] {
		return nil, true
	}
	if f.entered == nil {
		f.entered = map[string]int{}
	}
	f.entered[id]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.entered[id]--
	}, false
}

func (f *fakeParts) hold(id string, held bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held[id] = held
}

func (f *fakeParts) NFTables() (host.NFTables, error) { return &f.nft, nil }

func (f *fakeParts) IPTablesOnNFTables() bool { return true }

func (f *fakeParts) NewChecker(context.Context, Read) Checker { return fakeChecker{f} }

func (f *fakeParts) Refused(_ context.Context, network string, notInPlace bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refused = append(f.refused, map[bool]string{true: network + " not-in-place", false: network + " refused"}[notInPlace])
}

func (f *fakeParts) RepairedAfter(context.Context, string, time.Duration) {}

// fakeChecker reads what the fake host lacks.
type fakeChecker struct{ f *fakeParts }

func (c fakeChecker) Check(lives []*footprint.Live) []footprint.Health {
	c.f.mu.Lock()
	c.f.reads++
	reads, after := c.f.reads, c.f.afterCheck
	out := make([]footprint.Health, len(lives))
	for i, l := range lives {
		out[i] = footprint.Health{Live: l, Missing: slices.Clone(c.f.missing[identity.Key{Network: l.Network, ID: l.ID, IfName: l.IfName}])}
	}
	c.f.mu.Unlock()
	if after != nil {
		after(reads)
	}
	return out
}

func (c fakeChecker) Repair(footprint.Health, footprint.Restorers) ([]footprint.Missing, error) {
	return nil, errors.New("the fake's attachments repair themselves")
}

// syncLog is a log the watcher writes and a test reads.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testConfig is a watcher's Config of runner's attachments, every
// interval, and the log it writes (logged should the test fail).
func testConfig(t *testing.T, every time.Duration) (Config, *syncLog) {
	log := &syncLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(log.String())
		}
	})
	return Config{Every: every, Owner: "runner", Logger: hclog.New(&hclog.LoggerOptions{Output: log, Level: hclog.Info})}, log
}

// startTestWatcher starts a watcher of cfg through f; the test's end
// stops it.
func startTestWatcher(t *testing.T, cfg Config, f *fakeParts) *Watcher {
	w := New(cfg, f)
	w.Start()
	t.Cleanup(w.Stop)
	return w
}

// setPacing sets one of the watcher's pacing variables for the test.
func setPacing[T any](t *testing.T, v *T, to T) {
	was := *v
	*v = to
	t.Cleanup(func() { *v = was }) // registered before the watcher's Stop: runs after it
}

// waitFor polls cond until it holds, failing after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waited 10s for %s", what)
}

// RestoreRules writes, when the fake is batching, the iptables pieces of
// every attachment of hs that lacks only such pieces and is not
// unbatchable.
func (c fakeChecker) RestoreRules(hs []footprint.Health) ([]int, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.batching {
		return nil, nil
	}
	var members []int
	var keys []identity.Key
	for i, h := range hs {
		key := identity.Key{Network: h.Live.Network, ID: h.Live.ID, IfName: h.Live.IfName}
		iptablesOnly := len(h.Missing) > 0 && !slices.ContainsFunc(h.Missing, func(m footprint.Missing) bool { return m.Backend != "iptables" })
		if !iptablesOnly || f.unbatchable[key.ID] {
			continue
		}
		if f.entered[key.ID] == 0 {
			f.unlocked = append(f.unlocked, key.ID)
		}
		members, keys = append(members, i), append(keys, key)
		f.missing[key] = nil
	}
	f.batches = append(f.batches, keys)
	return members, nil
}
