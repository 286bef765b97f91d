package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/seed1280861d/cninet"
)

// othersRange is the attachments of another network present on the host
// while the overhead is measured at scale: nothing of them belongs to the
// measured network, so neither cninet nor the plugins may touch them, but
// every listing they make has to read past them.
var othersRange = fakeRange{network: "scaleothers", idPrefix: "other",
	subnet4: netip.MustParsePrefix("198.19.0.0/16"), subnet6: netip.MustParsePrefix("fd00:198:18:0:ff00::/80"), port0: 30000}

// overheadScale: scenario 1 with 0, 250, 1,000 … other attachments'
// rules and reservations on the host, for each plugin set: Debian's,
// upstream's with iptables, upstream's with nftables (whose others are in
// nftables too). Per size, the contenders are interleaved, each first in turn.
func overheadScale(r *report) error {
	sizes := slices.Clone(r.opts.scaleSizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	sets := append([]pluginSet{r.opts.debianSet()}, r.opts.upstreamSets()...)
	var results []scaleResult
	for _, set := range sets {
		b, err := newBench(set, r.opts.control)
		if err != nil {
			return err
		}
		nft, present := set.Backend == cninet.BackendNFTables, 0
		for _, size := range sizes {
			if size > present {
				if err := writeFootprints(othersRange, present, size, true, nft); err != nil {
					return fmt.Errorf("%s: writing %d other attachments: %w", set.Name, size, err)
				}
				present = size
			}
			res, err := b.measure(r.opts.scaleN, r.opts.noiseCap*r.opts.scaleN, fmt.Sprintf("scale-%d", size))
			if err != nil {
				return fmt.Errorf("%s, %d others: %w", set.Name, size, err)
			}
			res.RulesIPT, res.RulesNFT = iptablesRuleTotal(), nftRuleTotal()
			results = append(results, scaleResult{overheadResult: res, Others: size})
			fmt.Fprintf(os.Stderr, "bench:   %s, %d others: cninet %s, go-cni %s, ratio %.3f (control %s); DEL − Remove %s, Teardown outside its phases %s; cleanup %s, cninet's own processes per Teardown %d\n",
				set.Name, size, ms(res.Lib.median()), ms(res.Direct.median()), ratio(res.Lib.median(), res.Direct.median()), controlRatio(res),
				signedMs(res.LibDel.median()-res.DirectTeardown.median()), ms(res.TeardownOutside.median()), ms(res.Cleanup.median()), res.Procs.Own)
		}
		if err := removeOthers(set, present); err != nil {
			return err
		}
	}
	r.res.Scale = results
	return nil
}

// removeOthers removes the n other attachments with cninet's GC on their
// network (a no-op CNI) and checks that nothing of them is left.
func removeOthers(set pluginSet, n int) error {
	if n == 0 {
		return nil
	}
	c, err := gcConfigurator(othersRange, set.Backend)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := c.GC(ctx, []string{}); err != nil {
		return fmt.Errorf("removing the other attachments: %w", err)
	}
	return checkGone(othersRange, n, "removing the other attachments")
}

// iptablesRuleTotal counts the rules in iptables and ip6tables.
func iptablesRuleTotal() int {
	n := 0
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out, _ := exec.Command(cmd).Output()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "-A ") {
				n++
			}
		}
	}
	return n
}
