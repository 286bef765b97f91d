package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet"
	"github.com/spf13/cobra"
)

// libcniCacheDir is where go-cni, and so cninet's gc, caches results.
const libcniCacheDir = "/var/lib/cni"

// gcFlags are gc's own flags, beside the network flags.
type gcFlags struct {
	networkFlags
	live     []string
	liveFile string
	noneLive bool
	dryRun   bool
	cacheDir string
}

// gcCommand removes every attachment whose id is not live, in the
// networks named, or with --dry-run prints what it would collect.
func (c *cli) gcCommand() *cobra.Command {
	var f gcFlags
	cmd := &cobra.Command{
		Use:   "gc (--conf-dir DIR | --conflist FILE | --network N) (--live ID,... | --live-file PATH | --none-live) [--dry-run]",
		Short: "Remove every attachment whose id is not live, in the networks named",
		Long: `Remove every attachment whose allocation id is not live: in every network of
--conf-dir (or of --conflist, or the embedded default conflist named by
--network), narrowed to the --network ones if given. gc never collects a
network it was not pointed at: without --conf-dir, --conflist or --network it
refuses.

The live ids come from --live (comma-separated, repeatable) and --live-file
(one id a line; blank lines and lines starting with # are ignored); each must
be a valid CNI container id. --none-live says that nothing is live.

--dry-run removes nothing: it lists the attachments libcni's cache holds in
those networks whose id is not live, which gc would detach. What no cache
remembers (rules, reservations and files of attachments cached nowhere),
which gc's sweep would also remove by the ownership rule, is not planned.`,
	}
	cmd.RunE = c.runE(func(*cobra.Command) error {
		if !f.explicit() {
			return usageErrorf("name the networks to collect: --conf-dir DIR, --conflist FILE or --network NAME (gc never sweeps a default network)")
		}
		ids, err := f.liveSet()
		if err != nil {
			return err
		}
		if !f.dryRun && filepath.Clean(f.cacheDir) != libcniCacheDir {
			return usageErrorf("--cache-dir %q needs --dry-run: gc runs the plugins through go-cni, which caches in %s", f.cacheDir, libcniCacheDir)
		}
		cfg, err := f.configurator(c.stderr)
		if err != nil {
			return err
		}
		defer cfg.Close()
		defer f.printTrace(c.stderr)
		if f.dryRun {
			return c.gcPlan(cfg, &f, ids)
		}
		ctx, cancel := signalContext()
		defer cancel()
		var opts cninet.GCOptions
		if f.confDir != "" { // a --conflist, or the embedded one, is the one network named
			opts.Networks = f.networks
		}
		report, err := cfg.GCWith(ctx, ids, opts)
		if report != nil {
			c.done(report, func(w io.Writer) { printGCItems(w, "removed", slices.Collect(report.All())) })
		}
		return err
	})
	fs := cmd.Flags()
	f.register(fs, "a network to collect (repeatable; default: every network of the conflists)")
	// A long GC logs its progress at Info: show it unless told otherwise.
	f.logLevel, fs.Lookup("log-level").DefValue = "info", "info"
	fs.StringArrayVar(&f.live, "live", nil, "comma-separated `ids` of the live allocations (repeatable)")
	fs.StringVar(&f.liveFile, "live-file", "", "read the ids of the live allocations from this `file`, one a line (# comments)")
	fs.BoolVar(&f.noneLive, "none-live", false, "nothing is live: collect every attachment of the networks")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print the cached attachments gc would collect, and change nothing")
	fs.StringVar(&f.cacheDir, "cache-dir", libcniCacheDir, "libcni's cache `directory` (another one only with --dry-run)")
	return cmd
}

// liveSet returns the live ids of --live and --live-file, or an empty set
// with --none-live.
func (f *gcFlags) liveSet() ([]string, error) {
	given := len(f.live) > 0 || f.liveFile != ""
	switch {
	case given && f.noneLive:
		return nil, usageErrorf("--none-live excludes --live and --live-file")
	case f.noneLive:
		return []string{}, nil
	case !given:
		return nil, usageErrorf("say which allocations are live: --live ID,..., --live-file PATH, or --none-live")
	}
	ids, err := parseLive(f.live)
	if err != nil {
		return nil, usageErrorf("--live: %v", err)
	}
	if f.liveFile != "" {
		fromFile, err := readLiveFile(f.liveFile)
		if err != nil {
			return nil, usageErrorf("--live-file: %v", err)
		}
		if len(fromFile) == 0 && len(ids) == 0 {
			return nil, usageErrorf("--live-file %s lists no id: pass --none-live to collect every attachment", f.liveFile)
		}
		ids = append(ids, fromFile...)
	}
	return ids, nil
}

// gcPlan prints what gc would collect of libcni's cache: the attachments
// in the networks collected whose id is not live. It changes nothing.
func (c *cli) gcPlan(cfg *cninet.Configurator, f *gcFlags, ids []string) error {
	networks := cfg.Networks()
	if len(f.networks) > 0 {
		for _, n := range f.networks {
			if !slices.Contains(networks, n) {
				return fmt.Errorf("%w: %q (known: %s)", cninet.ErrNetworkNotFound, n, strings.Join(networks, ", "))
			}
		}
		networks = f.networks
	}
	cached, err := libcni.NewCNIConfigWithCacheDir(nil, f.cacheDir, nil).GetCachedAttachments("")
	if err != nil {
		return fmt.Errorf("reading libcni's cache in %s: %w", f.cacheDir, err)
	}
	var items []cninet.GCItem
	for _, a := range cached {
		if slices.Contains(networks, a.Network) && !slices.Contains(ids, a.ContainerID) {
			items = append(items, cninet.GCItem{Kind: cninet.GCCachedAttachment, ID: a.ContainerID, Network: a.Network, Detail: a.IfName})
		}
	}
	slices.SortFunc(items, func(a, b cninet.GCItem) int {
		return strings.Compare(a.Network+"\x00"+a.ID+"\x00"+a.Detail, b.Network+"\x00"+b.ID+"\x00"+b.Detail)
	})
	if items == nil {
		items = []cninet.GCItem{}
	}
	const notPlanned = "state no cache remembers (rules, reservations, files), which gc's sweep also removes, is not planned by --dry-run"
	c.done(map[string]any{"dry_run": true, "would_collect": items, "not_planned": notPlanned}, func(w io.Writer) {
		printGCItems(w, "would collect", items)
		fmt.Fprintf(w, "dry run: nothing changed; %s\n", notPlanned)
	})
	return nil
}

// printGCItems writes one line per item for people, then a count.
func printGCItems(w io.Writer, verb string, items []cninet.GCItem) {
	for _, it := range items {
		line := fmt.Sprintf("%s %s: id %s", verb, it.Kind, it.ID)
		if it.Network != "" {
			line += fmt.Sprintf(" network %q", it.Network)
		}
		if it.Backend != "" {
			line += " (" + it.Backend + ")"
		}
		fmt.Fprintf(w, "%s: %s\n", line, it.Detail)
	}
	fmt.Fprintf(w, "%s: %d item(s)\n", verb, len(items))
}
