package main

import (
	"fmt"
	"os"
	"regexp"
	"sync"
	"time"

	gocni "github.com/containerd/go-cni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// multiResult is one plugin set with one workload on N networks.
type multiResult struct {
	Set                       pluginSet
	N                         int
	Lib, Direct               sample // Setup+Teardown vs. Setup+Remove
	LibSetup, LibTeardown     sample
	DirectSetup, DirectRemove sample
	Add, Del, Cleanup         sample // per network, from cninet's debug log
	Prevent                   sample // per network: the prevention before its DEL
	LibMaxAdd, LibMaxDetach   sample // per cycle: the slowest network's ADD and DEL+cleanup
}

// multiLog reads cninet's debug log: each network's ADD, prevention, DEL
// and cleanup.
type multiLog struct {
	mu                         sync.Mutex
	add, prevent, del, cleanup sample
}

var (
	multiAttached = regexp.MustCompile(`network attached:.* duration="?([^"\s]+)`)
	multiDetached = regexp.MustCompile(`network detached:.* prevent="?([^"\s]+)"? del="?([^"\s]+)"? cleanup="?([^"\s]+)`)
)

func (l *multiLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := multiAttached.FindSubmatch(p); m != nil {
		d, _ := time.ParseDuration(string(m[1]))
		l.add = append(l.add, d)
	} else if m := multiDetached.FindSubmatch(p); m != nil {
		p, _ := time.ParseDuration(string(m[1]))
		d, _ := time.ParseDuration(string(m[2]))
		c, _ := time.ParseDuration(string(m[3]))
		l.prevent, l.del, l.cleanup = append(l.prevent, p), append(l.del, d), append(l.cleanup, c)
	}
	return len(p), nil
}

func (l *multiLog) take() (add, prevent, del, cleanup sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	add, prevent, del, cleanup = l.add, l.prevent, l.del, l.cleanup
	l.add, l.prevent, l.del, l.cleanup = nil, nil, nil, nil
	return add, prevent, del, cleanup
}

// multiNetwork: one workload on 1, 2, 3 and 4 networks, cninet's
// Setup+Teardown vs. go-cni's Setup+Remove with the same conflists (go-cni
// loaded with all N, so it attaches them concurrently and removes them one
// after another), interleaved, on Debian's and upstream's plugins, the
// latter with the iptables and with the nftables backends.
func multiNetwork(r *report) error {
	var results []multiResult
	for _, set := range append([]pluginSet{r.opts.debianSet()}, r.opts.upstreamSets()...) {
		for n := 1; n <= 4; n++ {
			res, err := measureMulti(set, n, r.opts.multiN)
			if err != nil {
				return fmt.Errorf("%s, %d networks: %w", set.Name, n, err)
			}
			fmt.Fprintf(os.Stderr, "bench:   %s, %d networks: cninet %s (setup %s, teardown %s), go-cni %s (setup %s, remove %s), ratio %.3f\n",
				set.Name, n, ms(res.Lib.median()), ms(res.LibSetup.median()), ms(res.LibTeardown.median()),
				ms(res.Direct.median()), ms(res.DirectSetup.median()), ms(res.DirectRemove.median()), ratio(res.Lib.median(), res.Direct.median()))
			results = append(results, res)
		}
	}
	r.res.Multi = results
	return nil
}

func measureMulti(set pluginSet, n, cycles int) (multiResult, error) {
	res := multiResult{Set: set, N: n}
	var confs [][]byte
	var names []string
	for range n {
		cfg, conf, err := benchConf(set.Backend)
		if err != nil {
			return res, err
		}
		confs, names = append(confs, conf), append(names, cfg.NetworkName)
	}
	log := &multiLog{}
	c, err := cninet.New(cninet.Config{ConfList: confs[0], ConfLists: confs[1:], PluginDirs: []string{set.Dir},
		Logger: hclog.New(&hclog.LoggerOptions{Output: log, Level: hclog.Debug})})
	if err != nil {
		return res, err
	}
	defer c.Close()
	opts := []gocni.Opt{gocni.WithPluginDir([]string{set.Dir}), gocni.WithInterfacePrefix("eth")}
	for _, conf := range confs {
		opts = append(opts, gocni.WithConfListBytes(conf))
	}
	raw, err := gocni.New(opts...)
	if err != nil {
		return res, err
	}
	port := 28500
	cycle := func(useLib bool, id string) error {
		port++
		setup, teardown, err := multiCycle(c, raw, useLib, id, 28500+port%400, names)
		if err != nil {
			return err
		}
		if useLib {
			res.Lib, res.LibSetup, res.LibTeardown = append(res.Lib, setup+teardown), append(res.LibSetup, setup), append(res.LibTeardown, teardown)
		} else {
			res.Direct, res.DirectSetup, res.DirectRemove = append(res.Direct, setup+teardown), append(res.DirectSetup, setup), append(res.DirectRemove, teardown)
		}
		return nil
	}
	for _, useLib := range []bool{true, false} { // warm-up, not measured
		if err := cycle(useLib, fmt.Sprintf("multi%d-warm-%v", n, useLib)); err != nil {
			return res, err
		}
	}
	res = multiResult{Set: set, N: n}
	log.take()
	for i := range cycles {
		for _, useLib := range []bool{i%2 == 0, i%2 != 0} {
			if err := cycle(useLib, fmt.Sprintf("multi%d-%d-%v", n, i, useLib)); err != nil {
				return res, err
			}
			if useLib {
				add, prevent, del, cleanup := log.take()
				res.Add, res.Prevent = append(res.Add, add...), append(res.Prevent, prevent...)
				res.Del, res.Cleanup = append(res.Del, del...), append(res.Cleanup, cleanup...)
				res.LibMaxAdd = append(res.LibMaxAdd, maxOf(add))
				detach := make(sample, len(del))
				for j := range del {
					detach[j] = prevent[j] + del[j] + cleanup[j]
				}
				res.LibMaxDetach = append(res.LibMaxDetach, maxOf(detach))
			}
		}
	}
	return res, nil
}

func maxOf(s sample) time.Duration {
	var m time.Duration
	for _, d := range s {
		m = max(m, d)
	}
	return m
}

// multiCycle is one Setup and one Teardown (or go-cni Remove) of a fresh
// workload on every network of names, timed apart.
func multiCycle(c *cninet.Configurator, raw gocni.CNI, useLib bool, id string, port int, names []string) (setup, teardown time.Duration, err error) {
	w, err := netsandbox.CreateWorkload()
	if err != nil {
		return 0, 0, err
	}
	defer w.Delete()
	ctx, cancel := ctxMinute()
	defer cancel()
	alloc := benchAlloc(id, port)
	alloc.NetworkNames = names
	start := time.Now()
	if useLib {
		if _, err := c.Setup(ctx, alloc, w.Path); err != nil {
			return 0, 0, err
		}
		mid := time.Now()
		if err := c.Teardown(ctx, alloc, w.Path); err != nil {
			return 0, 0, err
		}
		return mid.Sub(start), time.Since(mid), nil
	}
	mappings, _ := cninet.PortMappings(alloc, false)
	opts := []gocni.NamespaceOpts{gocni.WithCapabilityPortMap(mappings), gocni.WithArgs("IgnoreUnknown", "1"),
		gocni.WithArgs("NOMAD_ALLOC_ID", id)}
	if _, err := raw.Setup(ctx, id, w.Path, opts...); err != nil {
		return 0, 0, err
	}
	mid := time.Now()
	if err := raw.Remove(ctx, id, w.Path, opts...); err != nil {
		return 0, 0, err
	}
	return mid.Sub(start), time.Since(mid), nil
}

func (r *report) multiSection(w writer) {
	w("## 7. Several networks: one workload on N networks\n\n")
	w("cninet `Setup`+`Teardown` of one workload on N default-bridge networks (each its own bridge and subnet, the same port mapping and args) vs. go-cni loaded with the same N conflists, `Setup`+`Remove`. go-cni attaches the networks concurrently and removes them one after another; cninet attaches and detaches them concurrently, the networks whose portmap uses nftables too: while the workload has other networks, each network's DEL runs without portmap (whose nftables DEL deletes by the bare container id, on every network); portmap's DEL runs once for the whole workload before, alone (`Prevention.HostportsFirst`, decided in `internal/footprint/prevent.go`; run by `attachments.Detachment.hostportsFirst` in `internal/attachments/teardown.go`), and cninet's force cleanup removes by address whatever hostport rule is left (the prevention rule). Warm-up cycle, then interleaved cycles; `-multinet-n` cycles per contender and N.\n\n")
	w("%s", r.when("multinet"))
	if len(r.res.Multi) == 0 {
		w("(not measured)\n\n")
		return
	}
	w("| plugin set | N | cycles | cninet median | go-cni median | ratio (median) | | cninet Setup / Teardown | go-cni Setup / Remove | cninet per network: ADD / prevention / DEL / cleanup (median) | slowest network per cycle: ADD / prevention+DEL+cleanup (median) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range r.res.Multi {
		q := ratio(m.Lib.median(), m.Direct.median())
		w("| %s | %d | %d | %s | %s | **%.3f×** | %s | %s / %s | %s / %s | %s / %s / %s / %s | %s / %s |\n", m.Set.Name, m.N, len(m.Lib),
			ms(m.Lib.median()), ms(m.Direct.median()), q, callRatio(m.Lib, m.Direct, spread(m.Direct, m.Lib), multiTarget(m)).verdict(),
			ms(m.LibSetup.median()), ms(m.LibTeardown.median()), ms(m.DirectSetup.median()), ms(m.DirectRemove.median()),
			ms(m.Add.median()), ms(m.Prevent.median()), ms(m.Del.median()), ms(m.Cleanup.median()), ms(m.LibMaxAdd.median()), ms(m.LibMaxDetach.median()))
	}
	w("\nTarget: ratio of medians ≤ %.2f× at every N; ≤ %.2f× at N = 3 with the nftables backends.\n\n", overheadTarget, multiTargetNFT3)
	multiWhere(w, r.res.Multi)
}

// multiWhere says where the time goes, from the numbers above.
func multiWhere(w writer, results []multiResult) {
	w("Where the time goes:\n\n")
	for _, m := range results {
		q := ratio(m.Lib.median(), m.Direct.median())
		w("- %s, N = %d: Setup %.2f× go-cni's, Teardown %.2f× go-cni's Remove; cninet's prevention before each network's DEL %s and force cleanup after it %s (medians), the slowest network's prevention+DEL+cleanup %s of a %s Teardown. %s\n",
			m.Set.Name, m.N, ratio(m.LibSetup.median(), m.DirectSetup.median()), ratio(m.LibTeardown.median(), m.DirectRemove.median()),
			ms(m.Prevent.median()), ms(m.Cleanup.median()), ms(m.LibMaxDetach.median()), ms(m.LibTeardown.median()), multiVerdict(m.N, q, multiTarget(m)))
	}
	w("\nOn the iptables backends both attach concurrently, so Setup costs about the same; the plugins' chain per network (bridge, firewall and portmap each calling iptables) is the bulk of it, and on two cores concurrent chains compete for the CPU, so N networks cost more than one. go-cni's Remove runs the networks' DEL chains one after another; cninet's Teardown runs them (each with its cleanup) concurrently, which more than pays for the cleanup from two networks on. With one network there is nothing to overlap: the ratio is cninet's cleanup and bookkeeping against the noise of a shared machine. With portmap's nftables backend the same holds: portmap's DEL runs once for the whole workload, then every network's DEL runs without it, concurrently, so nothing waits for another network's DEL.\n\n")
}

// multiTargetNFT3 is the target at N = 3 with portmap's nftables
// backend: its networks detach concurrently, as on iptables, where
// cninet's Teardown beats go-cni's one-after-another Remove.
const multiTargetNFT3 = 0.85

// multiTarget is m's target ratio.
func multiTarget(m multiResult) float64 {
	if m.N == 3 && m.Set.Backend == cninet.BackendNFTables {
		return multiTargetNFT3
	}
	return overheadTarget
}

func multiVerdict(n int, q, target float64) string {
	switch {
	case q <= target:
		return fmt.Sprintf("Target met (%.3f× ≤ %.2f×).", q, target)
	case n == 1:
		return fmt.Sprintf("Target **missed** (%.3f×): one network has nothing to overlap; what is left is cninet's bookkeeping and cleanup after DEL, and the noise of a shared machine.", q)
	default:
		return fmt.Sprintf("Target **missed** (%.3f× > %.2f×).", q, target)
	}
}
