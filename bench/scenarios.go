package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gocni "github.com/containerd/go-cni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

var netSeq atomic.Int32

// benchConf returns a fresh IPv4 bridge network in the benchmarking
// range, with the given backend ("" or iptables, nftables), optionally
// with extra plugins appended.
func benchConf(backend string, extra ...map[string]any) (cninet.BridgeConfig, []byte, error) {
	n := netSeq.Add(1)
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName, cfg.BridgeName = fmt.Sprintf("bench%d", n), fmt.Sprintf("benchbr%d", n)
	cfg.IPv4Subnet = fmt.Sprintf("198.18.%d.0/24", n)
	cfg.IPAMDataDir = "/run/cni"
	if backend == cninet.BackendNFTables {
		cfg.Backend = backend
	}
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil || len(extra) == 0 {
		return cfg, conf, err
	}
	var list map[string]any
	if err := json.Unmarshal(conf, &list); err != nil {
		return cfg, nil, err
	}
	for _, p := range extra {
		list["plugins"] = append(list["plugins"].([]any), p)
	}
	conf, err = json.Marshal(list)
	return cfg, conf, err
}

func newConfigurator(conf []byte, dirs ...string) (*cninet.Configurator, error) {
	return cninet.New(cninet.Config{ConfList: conf, PluginDirs: dirs, Logger: hclog.NewNullLogger()})
}

// cleanupLog reads cninet's debug log: how long each Teardown's force
// cleanup after DEL and prevention before it took, and whether it found
// anything left; and every timed phase of each cycle, summed over the
// cycle's networks until cycle takes them.
type cleanupLog struct {
	mu        sync.Mutex
	durations sample
	prevent   sample // the prevention before each DEL
	leftovers int
	phases    cyclePhases // since the last cycle
}

// registryTime is the host registry's share of one cycle, as cninet logs
// it (record=): writing the record before each ADD and completing it
// after (attachment recorded), writing the proof before each DEL (network
// detached; inside its prevent=), and removing the record after the
// detach (attachment forgotten).
type registryTime struct {
	Setup, Proof, Removal time.Duration
}

func (r registryTime) teardown() time.Duration { return r.Proof + r.Removal }

// cyclePhases is one cninet cycle as its debug log times it, each phase
// summed over the cycle's networks: in Setup, the wait for the
// allocation's locks and the finding of its networks (attachments
// found), each ADD (network attached … duration=) and the registry
// around it; in Teardown, the locks and the finding of its attachments,
// and per network the prevention, the DEL, the force cleanup (network
// detached) and the record's removal (attachment forgotten).
type cyclePhases struct {
	Registry                                         registryTime
	Add, Prevent, Del, Cleanup                       time.Duration
	SetupLock, SetupFind, TeardownLock, TeardownFind time.Duration
	// Loopback is looking at the workload's lo before and after the
	// operations whose chain has the loopback plugin (Connect,
	// Disconnect: "workload's lo checked").
	Loopback time.Duration
	// PreventWork and CleanupWork are where the prevention and the
	// force cleanup spent their time on the host (host work timed).
	PreventWork, CleanupWork hostWork
}

// setupOutside is what of a Setup that took wall its ADDs and the
// registry do not explain: locks, finding the networks, the rest.
func (p cyclePhases) setupOutside(wall time.Duration) time.Duration {
	return wall - p.Add - p.Registry.Setup
}

// teardownOutside is what of a Teardown that took wall its networks'
// prevention (the proof inside it), DEL, force cleanup and the record's
// removal do not explain: locks, finding the attachments, the rest.
func (p cyclePhases) teardownOutside(wall time.Duration) time.Duration {
	return wall - p.Prevent - p.Del - p.Cleanup - p.Registry.Removal
}

var (
	// hclog quotes a value with a non-ASCII character: 512.3µs.
	cleanupField = regexp.MustCompile(`network detached:.* cleanup="?([^"\s]+)`)
	preventField = regexp.MustCompile(`network detached:.* prevent="?([^"\s]+)`)
	delField     = regexp.MustCompile(`network detached:.* del="?([^"\s]+)`)
	addField     = regexp.MustCompile(`network attached:.* duration="?([^"\s]+)`)
	// The lock wait and the finding of the attachments, per operation.
	foundLine = regexp.MustCompile(`attachments found:.* operation=(\w+) .*lock="?([^"\s]+)"? find="?([^"\s]+)`)
	// The registry's share: record= of each line.
	recordedField  = regexp.MustCompile(`attachment recorded:.* record="?([^"\s]+)`)
	proofField     = regexp.MustCompile(`network detached:.* record="?([^"\s]+)`)
	forgottenField = regexp.MustCompile(`attachment forgotten:.* record="?([^"\s]+)`)
	// The workload's lo looked at before and after an operation.
	loCheckField   = regexp.MustCompile(`workload's lo checked:.* check="?([^"\s]+)`)
	loRestoreField = regexp.MustCompile(`workload's lo checked:.* restore="?([^"\s]+)`)
)

// logDuration is the duration re's first group reads in p, if any.
func logDuration(re *regexp.Regexp, p []byte) (time.Duration, bool) {
	m := re.FindSubmatch(p)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(string(m[1]))
	return d, err == nil
}

func (l *cleanupLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d, ok := logDuration(cleanupField, p); ok {
		l.durations = append(l.durations, d)
	}
	if d, ok := logDuration(preventField, p); ok {
		l.prevent = append(l.prevent, d)
	}
	l.phases.addLine(p)
	if bytes.Contains(p, []byte("removed state the CNI plugins left behind")) {
		l.leftovers++
	}
	return len(p), nil
}

// addLine adds the phase durations one line of cninet's debug log
// reports.
func (ph *cyclePhases) addLine(p []byte) {
	for _, f := range []struct {
		re *regexp.Regexp
		to *time.Duration
	}{{cleanupField, &ph.Cleanup}, {preventField, &ph.Prevent}, {delField, &ph.Del}, {addField, &ph.Add},
		{recordedField, &ph.Registry.Setup}, {proofField, &ph.Registry.Proof}, {forgottenField, &ph.Registry.Removal},
		{loCheckField, &ph.Loopback}, {loRestoreField, &ph.Loopback}} {
		if d, ok := logDuration(f.re, p); ok {
			*f.to += d
		}
	}
	if phase, w, ok := parseHostWork(p); ok {
		switch phase {
		case "prevent":
			ph.PreventWork.add(w)
		case "cleanup":
			ph.CleanupWork.add(w)
		}
	}
	if m := foundLine.FindSubmatch(p); m != nil {
		lock, _ := time.ParseDuration(string(m[2]))
		find, _ := time.ParseDuration(string(m[3]))
		if op := string(m[1]); op == "setup" || op == "connect" {
			ph.SetupLock, ph.SetupFind = ph.SetupLock+lock, ph.SetupFind+find
		} else {
			ph.TeardownLock, ph.TeardownFind = ph.TeardownLock+lock, ph.TeardownFind+find
		}
	}
}

func (l *cleanupLog) take() (cleanup, prevent sample, leftovers int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, p, n := l.durations, l.prevent, l.leftovers
	l.durations, l.prevent, l.leftovers, l.phases = nil, nil, 0, cyclePhases{}
	return d, p, n
}

// cycle is the phases of the cycle that just ended: what the log said
// since the last call (or take).
func (l *cleanupLog) cycle() cyclePhases {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.phases
	l.phases = cyclePhases{}
	return p
}

// recoveryLog reads cninet's debug log in the recovery scenario: per
// workload, how long the failed first ADD, the DEL and force cleanup
// after it, and the second ADD took.
type recoveryLog struct {
	mu                           sync.Mutex
	failedAdd, del, cleanup, add sample
	retrying                     map[string]bool // the first ADD failed, the detach after it not yet read
}

var (
	failedAddLine = regexp.MustCompile(`failed to attach network: alloc_id=(\S+) .*attempt=1 .*duration="?([^"\s]+)`)
	detachedLine  = regexp.MustCompile(`network detached: alloc_id=(\S+) .*del="?([^"\s]+)"? cleanup="?([^"\s]+)`)
	attachedLine  = regexp.MustCompile(`network attached: alloc_id=(\S+) .*attempt=2 .*duration="?([^"\s]+)`)
)

func (l *recoveryLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	durations := func(m [][]byte) []time.Duration {
		var ds []time.Duration
		for _, b := range m[2:] {
			d, _ := time.ParseDuration(string(b))
			ds = append(ds, d)
		}
		return ds
	}
	if m := failedAddLine.FindSubmatch(p); m != nil {
		l.failedAdd = append(l.failedAdd, durations(m)[0])
		l.retrying[string(m[1])] = true
	} else if m := detachedLine.FindSubmatch(p); m != nil && l.retrying[string(m[1])] {
		ds := durations(m)
		l.del, l.cleanup = append(l.del, ds[0]), append(l.cleanup, ds[1])
		delete(l.retrying, string(m[1]))
	} else if m := attachedLine.FindSubmatch(p); m != nil {
		l.add = append(l.add, durations(m)[0])
	}
	return len(p), nil
}

func loggedConfigurator(conf []byte, log io.Writer, dirs ...string) (*cninet.Configurator, error) {
	return cninet.New(cninet.Config{ConfList: conf, PluginDirs: dirs,
		Logger: hclog.New(&hclog.LoggerOptions{Output: log, Level: hclog.Debug})})
}

func ctxMinute() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Minute)
}

var benchAlloc = func(id string, port int) *cninet.Allocation {
	return &cninet.Allocation{ID: id, Ports: []cninet.Port{{Label: "http", Value: port, To: 8080}},
		Args: map[string]string{"NOMAD_ALLOC_ID": id}}
}

// overheadDebian and overheadNFT: Setup+Teardown through cninet vs. go-cni
// called directly with the same conflist and options, interleaved so
// drift hits both alike.
func overheadDebian(r *report) error { return overheadScenario(r, r.opts.debianSet()) }

func overheadNFT(r *report) error { return overheadScenario(r, r.opts.upstreamSets()[1]) }

func overheadScenario(r *report, set pluginSet) error {
	b, err := newBench(set, r.opts.control)
	if err != nil {
		return err
	}
	res, err := b.measure(r.opts.overheadN, r.opts.noiseCap*r.opts.overheadN, "ovh")
	if err != nil {
		return err
	}
	r.res.Overhead = slices.DeleteFunc(r.res.Overhead, func(o overheadResult) bool { return o.Set == set })
	r.res.Overhead = append(r.res.Overhead, res)
	return nil
}

// bench is one network measured through cninet and through go-cni, and,
// with a control, through a second go-cni on the same network: the two
// go-cnis differ by nothing but the machine's noise.
type bench struct {
	set     pluginSet
	conf    []byte
	log     *cleanupLog
	c       *cninet.Configurator
	raw     gocni.CNI
	control gocni.CNI // nil: no control
	port    int
}

// newBench makes a bench on a fresh network of set's backend; control
// adds the second go-cni.
func newBench(set pluginSet, control bool) (*bench, error) {
	_, conf, err := benchConf(set.Backend)
	if err != nil {
		return nil, err
	}
	b := &bench{set: set, conf: conf, log: &cleanupLog{}, port: 28000}
	if b.c, err = loggedConfigurator(conf, b.log, set.Dir); err != nil {
		return nil, err
	}
	if b.raw, err = gocni.New(gocni.WithPluginDir([]string{set.Dir}), gocni.WithConfListBytes(conf)); err != nil {
		return nil, err
	}
	if control {
		if b.control, err = gocni.New(gocni.WithPluginDir([]string{set.Dir}), gocni.WithConfListBytes(conf)); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (b *bench) nextPort() int {
	b.port++
	return 28000 + b.port%1000
}

// contender is who runs a cycle of the bench.
type contender int

const (
	viaCninet contender = iota
	viaGoCNI
	viaControl // the second go-cni
)

// order is the contenders of round i: each goes first, second (and
// third) equally often, so drift hits them alike; and each follows each
// other one equally often within the rounds (all six orders of three in
// turn), so that whatever a cycle leaves the next one (the kernel still
// freeing the last namespace, a collection of the last cycle's garbage)
// does not favour one contender. A rotation alone would have go-cni
// follow cninet in two rounds of three and the control in one.
func (b *bench) order(i int) []contender {
	if b.control == nil {
		return [][]contender{{viaCninet, viaGoCNI}, {viaGoCNI, viaCninet}}[i%2]
	}
	return [][]contender{
		{viaCninet, viaGoCNI, viaControl}, {viaGoCNI, viaControl, viaCninet}, {viaControl, viaCninet, viaGoCNI},
		{viaCninet, viaControl, viaGoCNI}, {viaControl, viaGoCNI, viaCninet}, {viaGoCNI, viaCninet, viaControl},
	}[i%6]
}

// rotation is how many rounds order takes to come round.
func (b *bench) rotation() int {
	if b.control == nil {
		return 2
	}
	return 6
}

// run is one cycle of who, labelled with who in a CPU profile
// (-cpuprofile; go tool pprof -tagfocus contender=cninet).
func (b *bench) run(who contender, id string) (ph phases, err error) {
	raw, useLib := b.raw, who == viaCninet
	if who == viaControl {
		raw = b.control
	}
	pprof.Do(context.Background(), pprof.Labels("contender", []string{"cninet", "go-cni", "control"}[who]), func(context.Context) {
		ph, err = cycle(b.c, raw, useLib, id, b.nextPort())
	})
	return ph, err
}

// measure runs one unmeasured warm-up cycle per contender, then n
// measured ones each, interleaved with a rotating first, and more, up to
// limit each, while cninet/go-cni is within the noise of overheadTarget
// (overheadResult.call; as many as moreCycles says, at least a rotation);
// then counts the processes of one more cycle of cninet and
// of go-cni.
func (b *bench) measure(n, limit int, prefix string) (overheadResult, error) {
	res := overheadResult{Set: b.set}
	for _, who := range b.order(0) {
		if _, err := b.run(who, fmt.Sprintf("%s-warm-%d", prefix, who)); err != nil {
			return res, err
		}
	}
	b.log.take()
	for i := 0; ; i++ {
		if i >= n {
			c := res.call()
			if c.told() || i >= limit {
				break
			}
			// The control's own deviation can hold a ratio the pairs'
			// spread tells apart: a rotation more, at least.
			more := max(moreCycles(c.Q, overheadTarget, res.noise(), i, b.rotation(), limit), min(b.rotation(), limit-i))
			fmt.Fprintf(os.Stderr, "bench:   %s: cninet/go-cni %.3f is within ±%.1f %% of its target after %d cycles: %d more\n",
				prefix, c.Q, 100*c.Margin, i, more)
			n = i + more
		}
		for _, who := range b.order(i) {
			ph, err := b.run(who, fmt.Sprintf("%s-%d-%d", prefix, i, who))
			if err != nil {
				return res, err
			}
			switch who {
			case viaCninet:
				res.addCninet(ph, b.log.cycle())
			case viaGoCNI:
				res.Direct, res.DirectSetup, res.DirectTeardown = append(res.Direct, ph.total()), append(res.DirectSetup, ph.setup), append(res.DirectTeardown, ph.teardown)
				res.DirectSetupCPU.add(ph.setupCPU)
				res.DirectTeardownCPU.add(ph.teardownCPU)
			case viaControl:
				res.Control, res.ControlSetup, res.ControlTeardown = append(res.Control, ph.total()), append(res.ControlSetup, ph.setup), append(res.ControlTeardown, ph.teardown)
			}
		}
	}
	res.Cleanup, res.Prevent, res.Leftovers = b.log.take()
	var err error
	res.Procs, res.DirectProcs, err = b.countProcs(prefix)
	return res, err
}

// addCninet adds one cninet cycle: its halves, its phases as its log
// times them, and what of each half they leave unexplained.
func (o *overheadResult) addCninet(ph phases, p cyclePhases) {
	o.Lib, o.LibSetup, o.LibTeardown = append(o.Lib, ph.total()), append(o.LibSetup, ph.setup), append(o.LibTeardown, ph.teardown)
	o.RecordSetup, o.RecordProof = append(o.RecordSetup, p.Registry.Setup), append(o.RecordProof, p.Registry.Proof)
	o.RecordRemoval, o.RecordTeardown = append(o.RecordRemoval, p.Registry.Removal), append(o.RecordTeardown, p.Registry.teardown())
	o.LibAdd, o.LibDel = append(o.LibAdd, p.Add), append(o.LibDel, p.Del)
	o.CyclePrevent, o.CycleCleanup = append(o.CyclePrevent, p.Prevent), append(o.CycleCleanup, p.Cleanup)
	o.SetupLock, o.SetupFind = append(o.SetupLock, p.SetupLock), append(o.SetupFind, p.SetupFind)
	o.TeardownLock, o.TeardownFind = append(o.TeardownLock, p.TeardownLock), append(o.TeardownFind, p.TeardownFind)
	o.SetupOutside, o.TeardownOutside = append(o.SetupOutside, p.setupOutside(ph.setup)), append(o.TeardownOutside, p.teardownOutside(ph.teardown))
	o.LibSetupCPU.add(ph.setupCPU)
	o.LibTeardownCPU.add(ph.teardownCPU)
}

// countProcs counts the iptables and nft processes of one Setup+Teardown
// through cninet (a fresh Configurator, opened while the shim is in PATH;
// its first cycle opens the handles and is not counted) and of one go-cni
// Setup+Remove. The plugins find the shim through PATH too.
func (b *bench) countProcs(prefix string) (lib, direct procCount, err error) {
	sh, err := installShim()
	if err != nil {
		return lib, direct, err
	}
	defer sh.remove()
	c, err := newConfigurator(b.conf, b.set.Dir)
	if err != nil {
		return lib, direct, err
	}
	defer c.Close()
	for i, what := range []string{"open", "lib", "direct"} {
		sh.reset()
		if _, err := oneCycle(c, b.raw, what != "direct", fmt.Sprintf("%s-count-%d", prefix, i), b.nextPort()); err != nil {
			return lib, direct, err
		}
		switch what {
		case "lib":
			lib = sh.count()
		case "direct":
			direct = sh.count()
		}
	}
	return lib, direct, nil
}

func oneCycle(c *cninet.Configurator, raw gocni.CNI, useLib bool, id string, port int) (time.Duration, error) {
	ph, err := cycle(c, raw, useLib, id, port)
	return ph.total(), err
}

// phases is one cycle's Setup and Teardown (go-cni: Setup and Remove),
// and the CPU each took: in this process and in the processes it waited
// for (the plugins and their iptables and nft).
type phases struct {
	setup, teardown       time.Duration
	setupCPU, teardownCPU cpuUse
}

func (p phases) total() time.Duration { return p.setup + p.teardown }

// cycle is one Setup+Teardown through cninet (useLib) or go-cni.
func cycle(c *cninet.Configurator, raw gocni.CNI, useLib bool, id string, port int) (phases, error) {
	var ph phases
	w, err := netsandbox.CreateWorkload()
	if err != nil {
		return ph, err
	}
	defer w.Delete()
	ctx, cancel := ctxMinute()
	defer cancel()
	alloc := benchAlloc(id, port)
	cpu, start := markCPU(), time.Now()
	if useLib {
		if _, err := c.Setup(ctx, alloc, w.Path); err != nil {
			return ph, err
		}
		ph.setup, ph.setupCPU, cpu, start = time.Since(start), cpu.since(), markCPU(), time.Now()
		if err := c.Teardown(ctx, alloc, w.Path); err != nil {
			return ph, err
		}
		ph.teardown, ph.teardownCPU = time.Since(start), cpu.since()
		return ph, nil
	}
	mappings, _ := cninet.PortMappings(alloc, false)
	opts := []gocni.NamespaceOpts{gocni.WithCapabilityPortMap(mappings), gocni.WithArgs("IgnoreUnknown", "1"),
		gocni.WithArgs("NOMAD_ALLOC_ID", id)}
	if _, err := raw.Setup(ctx, id, w.Path, opts...); err != nil {
		return ph, err
	}
	ph.setup, ph.setupCPU, cpu, start = time.Since(start), cpu.since(), markCPU(), time.Now()
	if err := raw.Remove(ctx, id, w.Path, opts...); err != nil {
		return ph, err
	}
	ph.teardown, ph.teardownCPU = time.Since(start), cpu.since()
	return ph, nil
}

// recovery: a plugin fails the first ADD of every workload; time until
// Setup returns ready with DefaultRetryPolicy vs. the fixed loop common in
// orchestrators (sleep 1 s + up to 1 s, no DEL between attempts).
func recovery(r *report) error {
	state, err := os.MkdirTemp("", "failonce-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	_, conf, err := benchConf("", map[string]any{"type": "failonce", "stateDir": state})
	if err != nil {
		return err
	}
	dirs := []string{r.opts.pluginDir, r.opts.failonceDir}
	log := &recoveryLog{retrying: map[string]bool{}}
	c, err := loggedConfigurator(conf, log, dirs...)
	if err != nil {
		return err
	}
	raw, err := gocni.New(gocni.WithPluginDir(dirs), gocni.WithConfListBytes(conf))
	if err != nil {
		return err
	}
	rec := &recoveryResult{}
	r.res.Recovery = rec
	for i := 0; i < r.opts.recoveryN; i++ {
		for _, useLib := range []bool{i%2 == 0, i%2 != 0} {
			id := fmt.Sprintf("rec-%d-%v", i, useLib)
			d, ok, err := recoverOne(c, raw, useLib, id, 28500+2*i)
			if err != nil {
				return err
			}
			if useLib {
				rec.Lib = append(rec.Lib, d)
				rec.LibFailed += b2i(!ok)
			} else {
				rec.Fixed = append(rec.Fixed, d)
				rec.FixedFailed += b2i(!ok)
			}
		}
	}
	rec.FailedAdd, rec.Del, rec.Cleanup, rec.Add = log.failedAdd, log.del, log.cleanup, log.add
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func recoverOne(c *cninet.Configurator, raw gocni.CNI, useLib bool, id string, port int) (time.Duration, bool, error) {
	w, err := netsandbox.CreateWorkload()
	if err != nil {
		return 0, false, err
	}
	defer w.Delete()
	ctx, cancel := ctxMinute()
	defer cancel()
	alloc := benchAlloc(id, port)
	defer c.Teardown(ctx, alloc, w.Path) // leave nothing for the next round, whoever set it up
	start := time.Now()
	if useLib {
		_, err := c.Setup(ctx, alloc, w.Path)
		return time.Since(start), err == nil, nil
	}
	mappings, _ := cninet.PortMappings(alloc, false)
	opts := []gocni.NamespaceOpts{gocni.WithCapabilityPortMap(mappings), gocni.WithArgs("IgnoreUnknown", "1")}
	for attempt := 1; attempt <= 3; attempt++ {
		if _, err := raw.Setup(ctx, id, w.Path, opts...); err == nil {
			return time.Since(start), true, nil
		}
		if attempt < 3 {
			time.Sleep(time.Second + time.Duration(rand.Int64N(int64(time.Second))))
		}
	}
	return time.Since(start), false, nil
}

// concurrency: k workloads set up and torn down at once, with cninet's
// per-allocation locking vs. one global lock around every call.
func concurrency(r *report) error {
	_, conf, err := benchConf("")
	if err != nil {
		return err
	}
	c, err := newConfigurator(conf, r.opts.pluginDir)
	if err != nil {
		return err
	}
	var global sync.Mutex
	conc := &concResult{Rounds: r.opts.concRounds}
	r.res.Conc = conc
	for _, k := range []int{1, 4, 16, 32} {
		var perAlloc, locked sample
		for round := 0; round < r.opts.concRounds; round++ {
			for _, useGlobal := range []bool{round%2 == 0, round%2 != 0} {
				var lock *sync.Mutex
				if useGlobal {
					lock = &global
				}
				d, err := burst(c, k, lock, fmt.Sprintf("conc-%d-%d-%v", k, round, useGlobal))
				if err != nil {
					return err
				}
				if useGlobal {
					locked = append(locked, d)
				} else {
					perAlloc = append(perAlloc, d)
				}
			}
		}
		conc.Levels = append(conc.Levels, concLevel{K: k, PerAlloc: perAlloc, Global: locked})
	}
	return nil
}

// burst sets up and tears down k workloads concurrently; with lock, every
// Setup and Teardown holds it, as a runner with one global lock would.
func burst(c *cninet.Configurator, k int, lock *sync.Mutex, prefix string) (time.Duration, error) {
	workloads, err := createWorkloads(k)
	defer deleteWorkloads(workloads)
	if err != nil {
		return 0, err
	}
	ctx, cancel := ctxMinute()
	defer cancel()
	errs := make(chan error, k)
	var wg sync.WaitGroup
	start := time.Now()
	for i, w := range workloads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			alloc := benchAlloc(fmt.Sprintf("%s-%d", prefix, i), 29000+i)
			call := func(f func() error) error {
				if lock != nil {
					lock.Lock()
					defer lock.Unlock()
				}
				return f()
			}
			if err := call(func() error { _, err := c.Setup(ctx, alloc, w.Path); return err }); err != nil {
				errs <- err
				return
			}
			if err := call(func() error { return c.Teardown(ctx, alloc, w.Path) }); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	return time.Since(start), nil
}

// coldStart: 32 workloads start at once on a host without the bridge
// (the bridge plugin's creation race), handled by retrying vs. by a
// one-time gate that lets the first attachment create the bridge alone.
func coldStart(r *report) error {
	const k = 32
	cold := &coldResult{}
	r.res.Cold = cold
	for round := 0; round < r.opts.concRounds; round++ {
		for _, gated := range []bool{round%2 == 0, round%2 != 0} {
			var failed atomic.Int64
			_, conf, err := benchConf("") // a new bridge name: cold
			if err != nil {
				return err
			}
			c, err := cninet.New(cninet.Config{ConfList: conf, PluginDirs: []string{r.opts.pluginDir},
				Logger: hclog.New(&hclog.LoggerOptions{Output: attemptCounter{&failed}, Level: hclog.Warn})})
			if err != nil {
				return err
			}
			d, err := coldBurst(c, k, gated, fmt.Sprintf("cold-%d-%v", round, gated))
			if err != nil {
				return err
			}
			if gated {
				cold.Gated = append(cold.Gated, d)
				cold.GatedRetries += int(failed.Load())
			} else {
				cold.Retry = append(cold.Retry, d)
				cold.RetryRetries += int(failed.Load())
			}
		}
	}
	return nil
}

// attemptCounter counts the failed ADD attempts cninet logs.
type attemptCounter struct{ n *atomic.Int64 }

func (a attemptCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("failed to attach network")) {
		a.n.Add(1)
	}
	return len(p), nil
}

func coldBurst(c *cninet.Configurator, k int, gated bool, prefix string) (time.Duration, error) {
	workloads, err := createWorkloads(k)
	defer deleteWorkloads(workloads)
	if err != nil {
		return 0, err
	}
	ctx, cancel := ctxMinute()
	defer cancel()
	setup := func(i int) error {
		_, err := c.Setup(ctx, benchAlloc(fmt.Sprintf("%s-%d", prefix, i), 29000+i), workloads[i].Path)
		return err
	}
	start := time.Now()
	first := 0
	if gated {
		if err := setup(0); err != nil {
			return 0, err
		}
		first = 1
	}
	errs := make(chan error, k)
	var wg sync.WaitGroup
	for i := first; i < k; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- setup(i)
		}()
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	for i, w := range workloads {
		if err := c.Teardown(ctx, benchAlloc(fmt.Sprintf("%s-%d", prefix, i), 29000+i), w.Path); err != nil {
			return 0, err
		}
	}
	return d, nil
}

func createWorkloads(k int) ([]*netsandbox.Workload, error) {
	var workloads []*netsandbox.Workload
	for i := 0; i < k; i++ {
		w, err := netsandbox.CreateWorkload()
		if err != nil {
			return workloads, err
		}
		workloads = append(workloads, w)
	}
	return workloads, nil
}

func deleteWorkloads(workloads []*netsandbox.Workload) {
	for _, w := range workloads {
		w.Delete()
	}
}
