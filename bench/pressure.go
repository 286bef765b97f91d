package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	gocni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// pressure: a busy host. Inside the bench's namespace the host holds
// -pressure-rules unrelated iptables rules in kube-proxy's shape and as
// many nftables rules in a table of their own; another writer applies a
// 1,000-rule iptables-restore --noflush batch every second; 16 workers
// set up and tear down -pressure-n workloads with a port mapping through
// cninet and as many through go-cni with the same plugins, the two
// interleaved (every other job is go-cni's), for each plugin set.

// pressureResult is one plugin set at one host size.
type pressureResult struct {
	Set                           pluginSet
	Size                          int // -pressure-rules asked for
	RulesIPT, RulesNFT            int // rules on the host while measuring, counted
	Workers, N                    int
	LibSetup, LibTeardown         sample
	DirectSetup, DirectTeardown   sample
	LibFailed, DirectFailed       int
	Failures                      []string // the first few, verbatim
	Registry, Prevention, Cleanup sample   // cninet's phases per cycle (successful cycles)
	LockFind                      sample   // the allocation's locks and finding its networks, both halves
	TeardownOwn                   sample   // of each Teardown, cninet's own: prevention (with the proof), cleanup, the record's removal, lock+find
	// CleanupWork and PreventWork are, in the order of Cleanup and
	// Prevention, where each cycle's phase spent its time on the host.
	CleanupWork, PreventWork []hostWork
	Batches, BatchFailed     int
	Batch                    sample // the writer's iptables-restore, each
	Load                     [3]float64
	Sched                    schedTimes    // the bench's threads while the workers ran: on a CPU, and waiting for one
	GoWait50, GoWait99       time.Duration // the bench's goroutines' waits to run (Go's scheduler), p50 and p99, while the workers ran
	Listing                  sample        // an iptables -t nat -S POSTROUTING every 2 s while the workers ran: what a cleanup that must list pays
	Took                     time.Duration
	Measured                 time.Time // when this set at this size was measured
	Machine                  string    // where
}

const (
	pressureWorkers   = 16
	pressureBatch     = 1000
	pressureTable     = "cninet_bench_kube" // the nftables shape's table
	pressureWriter    = "KUBE-BENCH-WRITER" // the competing writer's chain
	pressureMaxErrors = 5
)

// pressureScenario runs every plugin set at every host size, smallest
// first; the host's rules grow between sizes and go at the end.
func pressureScenario(r *report) error {
	sizes := slices.Clone(r.opts.pressureSizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	sets := append([]pluginSet{r.opts.debianSet()}, r.opts.upstreamSets()...)
	sets = slices.DeleteFunc(sets, func(s pluginSet) bool { return !strings.Contains(s.Name, r.opts.pressureSets) })
	if len(sets) == 0 {
		return fmt.Errorf("-pressure-sets %q names no plugin set", r.opts.pressureSets)
	}
	for _, size := range sizes {
		fmt.Fprintf(os.Stderr, "bench:   loading %d kube-proxy-shaped rules into iptables and into nftables...\n", size)
		start := time.Now()
		if err := loadKubeShape(size); err != nil {
			return fmt.Errorf("loading the host's %d rules: %w", size, err)
		}
		fmt.Fprintf(os.Stderr, "bench:   loaded in %s: %d iptables rules, %d nftables rules\n", time.Since(start).Round(time.Second), iptablesRuleTotal(), nftRuleTotal())
		for _, set := range sets {
			res, err := pressureRun(set, size, r.opts.pressureN)
			if err != nil {
				return fmt.Errorf("%s at %d rules: %w", set.Name, size, err)
			}
			r.res.Pressure = slices.DeleteFunc(r.res.Pressure, func(p pressureResult) bool { return p.Set == set && p.Size == size })
			r.res.Pressure = append(r.res.Pressure, res)
			fmt.Fprintf(os.Stderr, "bench:   %s, %d rules: Teardown p50 cninet %s go-cni %s; Setup p50 cninet %s go-cni %s; failures %d/%d; cninet's own per Teardown p50 %s; writer %d batches (%d failed), load %.1f\n",
				set.Name, size, ms(res.LibTeardown.median()), ms(res.DirectTeardown.median()), ms(res.LibSetup.median()), ms(res.DirectSetup.median()),
				res.LibFailed, res.DirectFailed, ms(res.TeardownOwn.median()), res.Batches, res.BatchFailed, res.Load[0])
		}
		if err := unloadKubeShape(size); err != nil {
			return err
		}
	}
	slices.SortStableFunc(r.res.Pressure, func(a, b pressureResult) int { return a.Size - b.Size })
	return nil
}

// kubeShape is kube-proxy's nat table for n rules: KUBE-SERVICES matches
// each service's cluster IP and jumps to its KUBE-SVC chain, which picks
// one of two endpoints at random, each a KUBE-SEP chain that marks
// hairpin traffic for masquerade and DNATs to the endpoint: seven rules
// a service. Cluster IPs are in 198.19.0.0/16, endpoints in
// 198.18.128.0/17: nothing of the bench's networks.
type kubeShape struct{ services int }

func newKubeShape(rules int) kubeShape { return kubeShape{services: max(rules/7, 1)} }

func svcIP(i int) string { return fmt.Sprintf("198.19.%d.%d", (i>>8)&255, i&255) }

func epIP(j int) string { j %= 32768; return fmt.Sprintf("198.18.%d.%d", 128+(j>>8)&127, j&255) }

func svcChain(i int) string { return fmt.Sprintf("KUBE-SVC-%016X", uint64(i)*0x9E3779B97F4A7C15) }
func sepChain(i, k int) string {
	return fmt.Sprintf("KUBE-SEP-%016X", uint64(2*i+k+1)*0xC2B2AE3D27D4EB4F)
}
func svcName(i int) string        { return fmt.Sprintf("bench/svc-%d:http", i) }
func nftSvcChain(i int) string    { return fmt.Sprintf("svc-%d", i) }
func nftSepChain(i, k int) string { return fmt.Sprintf("sep-%d-%d", i, k) }

// iptablesRestore is the shape as one iptables-restore --noflush input.
func (s kubeShape) iptablesRestore() []byte {
	var b bytes.Buffer
	b.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n")
	for i := range s.services {
		fmt.Fprintf(&b, ":%s - [0:0]\n:%s - [0:0]\n:%s - [0:0]\n", svcChain(i), sepChain(i, 0), sepChain(i, 1))
	}
	b.WriteString("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n")
	b.WriteString("-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n")
	b.WriteString("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n")
	for i := range s.services {
		name := svcName(i)
		fmt.Fprintf(&b, "-A KUBE-SERVICES -d %s/32 -p tcp -m comment --comment \"%s cluster IP\" -m tcp --dport 80 -j %s\n", svcIP(i), name, svcChain(i))
		fmt.Fprintf(&b, "-A %s -m comment --comment \"%s -> %s:8080\" -m statistic --mode random --probability 0.50000000000 -j %s\n", svcChain(i), name, epIP(2*i), sepChain(i, 0))
		fmt.Fprintf(&b, "-A %s -m comment --comment \"%s -> %s:8080\" -j %s\n", svcChain(i), name, epIP(2*i+1), sepChain(i, 1))
		for k := range 2 {
			ep := epIP(2*i + k)
			fmt.Fprintf(&b, "-A %s -s %s/32 -m comment --comment \"%s\" -j KUBE-MARK-MASQ\n", sepChain(i, k), ep, name)
			fmt.Fprintf(&b, "-A %s -p tcp -m comment --comment \"%s\" -m tcp -j DNAT --to-destination %s:8080\n", sepChain(i, k), name, ep)
		}
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// iptablesRemoval removes the shape in one iptables-restore --noflush:
// the chains declared (so flushed), the portal jumps deleted, the chains
// deleted.
func (s kubeShape) iptablesRemoval() []byte {
	var b bytes.Buffer
	chains := []string{"KUBE-SERVICES", "KUBE-MARK-MASQ"}
	for i := range s.services {
		chains = append(chains, svcChain(i), sepChain(i, 0), sepChain(i, 1))
	}
	b.WriteString("*nat\n")
	for _, c := range chains {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for _, hook := range []string{"PREROUTING", "OUTPUT"} {
		fmt.Fprintf(&b, "-D %s -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n", hook)
	}
	for _, c := range chains {
		fmt.Fprintf(&b, "-X %s\n", c)
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}

// nftScript is the same shape in a table of its own, as kube-proxy's
// nftables mode would write it without its maps: a nat prerouting chain
// jumps to services, which matches each cluster IP, and so on down.
func (s kubeShape) nftScript() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "table ip %s {\n", pressureTable)
	b.WriteString("\tchain mark-for-masquerade {\n\t\tmeta mark set mark or 0x4000\n\t}\n")
	for i := range s.services {
		name := svcName(i)
		fmt.Fprintf(&b, "\tchain %s {\n\t\tnumgen random mod 2 == 0 jump %s comment \"%s\"\n\t\tjump %s comment \"%s\"\n\t}\n",
			nftSvcChain(i), nftSepChain(i, 0), name, nftSepChain(i, 1), name)
		for k := range 2 {
			ep := epIP(2*i + k)
			fmt.Fprintf(&b, "\tchain %s {\n\t\tip saddr %s jump mark-for-masquerade\n\t\tmeta l4proto tcp dnat to %s:8080\n\t}\n", nftSepChain(i, k), ep, ep)
		}
	}
	b.WriteString("\tchain services {\n")
	for i := range s.services {
		fmt.Fprintf(&b, "\t\tip daddr %s tcp dport 80 jump %s\n", svcIP(i), nftSvcChain(i))
	}
	b.WriteString("\t}\n\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}\n}\n")
	return b.Bytes()
}

func loadKubeShape(rules int) error {
	s := newKubeShape(rules)
	if err := runWithInput(s.iptablesRestore(), "iptables-restore", "--noflush"); err != nil {
		return err
	}
	return runWithInput(s.nftScript(), "nft", "-f", "-")
}

func unloadKubeShape(rules int) error {
	if err := runWithInput(newKubeShape(rules).iptablesRemoval(), "iptables-restore", "--noflush"); err != nil {
		return fmt.Errorf("removing the kube-proxy shape from iptables: %w", err)
	}
	if err := runWithInput(nil, "nft", "delete", "table", "ip", pressureTable); err != nil {
		return fmt.Errorf("removing the kube-proxy shape from nftables: %w", err)
	}
	return nil
}

func runWithInput(in []byte, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(in)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, firstLines(strings.TrimSpace(string(out)), 5))
	}
	return nil
}

// competingWriter applies, every second, a batch of pressureBatch rules
// to a chain of its own with iptables-restore --noflush: the chain is
// declared, so each batch replaces the last, as kube-proxy's syncs do.
type competingWriter struct {
	done    chan struct{}
	exited  chan struct{}
	mu      sync.Mutex
	batches sample
	failed  int
}

func startCompetingWriter() *competingWriter {
	w := &competingWriter{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(w.exited)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for round := 0; ; round++ {
			var b bytes.Buffer
			fmt.Fprintf(&b, "*nat\n:%s - [0:0]\n", pressureWriter)
			for i := range pressureBatch {
				fmt.Fprintf(&b, "-A %s -d %s/32 -p tcp -m tcp --dport %d -j DNAT --to-destination %s:8080\n",
					pressureWriter, svcIP(40000+i), 1024+round%1000, epIP(20000+i))
			}
			b.WriteString("COMMIT\n")
			start := time.Now()
			err := runWithInput(b.Bytes(), "iptables-restore", "--noflush")
			w.mu.Lock()
			w.batches = append(w.batches, time.Since(start))
			if err != nil {
				w.failed++
			}
			w.mu.Unlock()
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the writer and removes its chain.
func (w *competingWriter) stop() (sample, int, error) {
	close(w.done)
	<-w.exited
	err := runWithInput([]byte(fmt.Sprintf("*nat\n:%s - [0:0]\n-X %s\nCOMMIT\n", pressureWriter, pressureWriter)), "iptables-restore", "--noflush")
	return w.batches, w.failed, err
}

// listingProbe times, every 2 s, one iptables listing of one chain, as a
// cleanup runs it when the DEL left something of its attachment: on this
// host its cost is what such a cleanup pays on top of its netlink probes.
type listingProbe struct {
	done, exited chan struct{}
	took         sample
}

func startListingProbe() *listingProbe {
	p := &listingProbe{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			start := time.Now()
			if exec.Command("iptables", "-t", "nat", "-S", "POSTROUTING", "-w", "5").Run() == nil {
				p.took = append(p.took, time.Since(start))
			}
		}
	}()
	return p
}

func (p *listingProbe) stop() sample {
	close(p.done)
	<-p.exited
	return p.took
}

// pressureLog reads cninet's debug log per allocation: cycles run
// concurrently here, so each line's phase goes to its alloc_id.
type pressureLog struct {
	mu     sync.Mutex
	phases map[string]*cyclePhases
}

var allocField = regexp.MustCompile(`alloc_id=(\S+)`)

func (l *pressureLog) Write(p []byte) (int, error) {
	m := allocField.FindSubmatch(p)
	if m == nil {
		return len(p), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ph := l.phases[string(m[1])]
	if ph == nil {
		ph = &cyclePhases{}
		l.phases[string(m[1])] = ph
	}
	ph.addLine(p)
	return len(p), nil
}

func (l *pressureLog) of(id string) (cyclePhases, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ph, ok := l.phases[id]
	if !ok {
		return cyclePhases{}, false
	}
	return *ph, true
}

// pressureJob is one workload's Setup+Teardown; every other one is go-cni's.
type pressureJob struct {
	id     string
	port   int
	useLib bool
}

type pressureOutcome struct {
	job             pressureJob
	setup, teardown time.Duration
	err             error
}

// pressureRun measures one plugin set on the loaded host: a warm-up cycle
// of each contender (the bridge is created), then the writer starts and
// the workers run 2n jobs.
func pressureRun(set pluginSet, size, n int) (pressureResult, error) {
	res := pressureResult{Set: set, Size: size, Workers: pressureWorkers, N: n, Measured: time.Now(), Machine: machine()}
	_, conf, err := benchConf(set.Backend)
	if err != nil {
		return res, err
	}
	log := &pressureLog{phases: map[string]*cyclePhases{}}
	c, err := loggedConfigurator(conf, log, set.Dir)
	if err != nil {
		return res, err
	}
	defer c.Close()
	raw, err := gocni.New(gocni.WithPluginDir([]string{set.Dir}), gocni.WithConfListBytes(conf))
	if err != nil {
		return res, err
	}
	for i, useLib := range []bool{true, false} {
		if o := pressureCycle(c, raw, pressureJob{fmt.Sprintf("pr-warm-%d", i), 39990 + i, useLib}); o.err != nil {
			return res, fmt.Errorf("warm-up: %w", o.err)
		}
	}
	res.RulesIPT, res.RulesNFT = iptablesRuleTotal(), nftRuleTotal()

	jobs := make(chan pressureJob)
	outcomes := make(chan pressureOutcome, 2*n)
	writer := startCompetingWriter()
	lister := startListingProbe()
	start, sched, goSched := time.Now(), ownSchedTimes(), readGoSchedLatencies()
	var wg sync.WaitGroup
	for range pressureWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				outcomes <- pressureCycle(c, raw, j)
			}
		}()
	}
	for k := range 2 * n {
		jobs <- pressureJob{id: fmt.Sprintf("pr-%d-%d", size, k), port: 40000 + k%20000, useLib: k%2 == 0}
	}
	close(jobs)
	wg.Wait()
	close(outcomes)
	res.Took = time.Since(start)
	res.Load = loadAverage()
	res.Sched = ownSchedTimes().since(sched)
	res.GoWait50, res.GoWait99 = readGoSchedLatencies().percentileSince(goSched, 50), readGoSchedLatencies().percentileSince(goSched, 99)
	var werr error
	res.Batch, res.BatchFailed, werr = writer.stop()
	res.Listing = lister.stop()
	res.Batches = len(res.Batch)
	if werr != nil {
		return res, fmt.Errorf("removing the writer's chain: %w", werr)
	}
	for o := range outcomes {
		if o.err != nil {
			if o.job.useLib {
				res.LibFailed++
			} else {
				res.DirectFailed++
			}
			res.noteFailure(contenderName(o.job.useLib), o.err)
			continue
		}
		if !o.job.useLib {
			res.DirectSetup, res.DirectTeardown = append(res.DirectSetup, o.setup), append(res.DirectTeardown, o.teardown)
			continue
		}
		res.LibSetup, res.LibTeardown = append(res.LibSetup, o.setup), append(res.LibTeardown, o.teardown)
		if ph, ok := log.of(o.job.id); ok {
			res.Registry = append(res.Registry, ph.Registry.Setup+ph.Registry.teardown())
			res.Prevention = append(res.Prevention, ph.Prevent-ph.Registry.Proof)
			res.Cleanup = append(res.Cleanup, ph.Cleanup)
			res.CleanupWork = append(res.CleanupWork, ph.CleanupWork)
			res.PreventWork = append(res.PreventWork, ph.PreventWork)
			res.LockFind = append(res.LockFind, ph.SetupLock+ph.SetupFind+ph.TeardownLock+ph.TeardownFind)
			res.TeardownOwn = append(res.TeardownOwn, ph.Prevent+ph.Cleanup+ph.Registry.Removal+ph.TeardownLock+ph.TeardownFind)
		}
	}
	return res, nil
}

// noteFailure keeps the first pressureMaxErrors distinct failures of each
// contender, counting the repeats; a workload's own name and port are
// left out so that the same failure reads the same.
func (p *pressureResult) noteFailure(who string, err error) {
	msg := who + ": " + pressureIDs.ReplaceAllString(err.Error(), "<id>")
	for i, f := range p.Failures {
		if strings.HasPrefix(f, msg+" (×") || f == msg {
			n := 1
			fmt.Sscanf(strings.TrimPrefix(f, msg+" (×"), "%d", &n)
			p.Failures[i] = fmt.Sprintf("%s (×%d)", msg, n+1)
			return
		}
	}
	mine := 0
	for _, f := range p.Failures {
		if strings.HasPrefix(f, who+": ") {
			mine++
		}
	}
	if mine < pressureMaxErrors {
		p.Failures = append(p.Failures, msg)
	}
}

var pressureIDs = regexp.MustCompile(`pr-\d+-\d+`)

func contenderName(useLib bool) string {
	if useLib {
		return "cninet"
	}
	return "go-cni"
}

// pressureCycle is one job: a workload namespace, Setup, Teardown (go-cni:
// Remove). A failed half is tried once more to leave the host clean; the
// job counts as failed all the same.
func pressureCycle(c *cninet.Configurator, raw gocni.CNI, j pressureJob) (o pressureOutcome) {
	o.job = j
	w, err := netsandbox.CreateWorkload()
	if err != nil {
		o.err = err
		return o
	}
	defer w.Delete()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alloc := benchAlloc(j.id, j.port)
	mappings, _ := cninet.PortMappings(alloc, false)
	opts := []gocni.NamespaceOpts{gocni.WithCapabilityPortMap(mappings), gocni.WithArgs("IgnoreUnknown", "1"), gocni.WithArgs("NOMAD_ALLOC_ID", j.id)}
	setup := func() error {
		if j.useLib {
			_, err := c.Setup(ctx, alloc, w.Path)
			return err
		}
		_, err := raw.Setup(ctx, j.id, w.Path, opts...)
		return err
	}
	teardown := func(ctx context.Context) error {
		if j.useLib {
			return c.Teardown(ctx, alloc, w.Path)
		}
		return raw.Remove(ctx, j.id, w.Path, opts...)
	}
	start := time.Now()
	if o.err = setup(); o.err != nil {
		o.err = fmt.Errorf("setup: %w", o.err)
		teardown(context.Background())
		return o
	}
	o.setup, start = time.Since(start), time.Now()
	if o.err = teardown(ctx); o.err != nil {
		o.err = fmt.Errorf("teardown: %w", o.err)
		teardown(context.Background())
		return o
	}
	o.teardown = time.Since(start)
	return o
}

func loadAverage() (l [3]float64) {
	raw, _ := os.ReadFile("/proc/loadavg")
	fmt.Sscanf(string(raw), "%f %f %f", &l[0], &l[1], &l[2])
	return l
}

// percentile is the nearest-rank q-th percentile (0 < q ≤ 100).
func (s sample) percentile(q int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := s.sorted()
	i := (len(c)*q+99)/100 - 1
	return c[max(i, 0)]
}

// pcts is "p50 / p95 / p99".
func pcts(s sample) string {
	if len(s) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s / %s", ms(s.percentile(50)), ms(s.percentile(95)), ms(s.percentile(99)))
}
