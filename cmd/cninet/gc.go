package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/seed1280861d/cninet"
	"github.com/spf13/cobra"
)

// gcFlags are gc's own flags, beside the network flags.
type gcFlags struct {
	networkFlags
	live     []string
	liveFile string
	noneLive bool
	dryRun   bool
}

// gcCommand removes every attachment whose id is not live, in the
// networks named, or with --dry-run prints what it would remove.
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

gc collects only --owner's attachments (the host registry in --state-dir
says whose each is), any owner's recorded in an earlier boot of the host,
and state no record claims once its namespace is gone and the ownership
rule proves it dead; another owner's live attachments are never touched.
A registry file this cninet cannot read is kept and named, and nothing of
its allocation is collected.

--dry-run removes nothing and runs no plugin: it prints the plan — the
recorded and cached attachments gc would detach, then every rule, chain,
file and device its sweep would remove.`,
	}
	cmd.RunE = c.end.runE(func(*cobra.Command) error {
		if !f.explicit() {
			return usageErrorf("name the networks to collect: --conf-dir DIR, --conflist FILE or --network NAME (gc never sweeps a default network)")
		}
		ids, err := f.liveSet()
		if err != nil {
			return err
		}
		cfg, err := f.configurator(c.stderr)
		if err != nil {
			return err
		}
		defer cfg.Close()
		defer f.printTrace(c.stderr)
		ctx, cancel := signalContext()
		defer cancel()
		opts := cninet.GCOptions{DryRun: f.dryRun}
		if f.confDir != "" { // a --conflist, or the embedded one, is the one network named
			opts.Networks = f.networks
		}
		report, err := cfg.GC(ctx, ids, opts)
		if report == nil {
			return err
		}
		if f.dryRun {
			items := slices.Collect(report.All())
			if items == nil {
				items = []cninet.GCItem{}
			}
			c.end.done(map[string]any{"dry_run": true, "would_remove": items}, func(w io.Writer) {
				printGCItems(w, "would remove", items)
				fmt.Fprintln(w, "dry run: nothing changed")
			})
			return err
		}
		c.end.done(report, func(w io.Writer) {
			printGCItems(w, "removed", slices.Collect(report.All()))
			for _, path := range report.Unreadable() {
				fmt.Fprintf(w, "kept: registry file %s is no record this cninet can read; nothing of its allocation was collected\n", path)
			}
		})
		return err
	})
	fs := cmd.Flags()
	f.register(fs, "a network to collect (repeatable; default: every network of the conflists)")
	// A long GC logs its progress at Info: show it unless told otherwise.
	f.logLevel, fs.Lookup("log-level").DefValue = "info", "info"
	fs.StringArrayVar(&f.live, "live", nil, "comma-separated `ids` of the live allocations (repeatable)")
	fs.StringVar(&f.liveFile, "live-file", "", "read the ids of the live allocations from this `file`, one a line (# comments)")
	fs.BoolVar(&f.noneLive, "none-live", false, "nothing is live: collect every attachment of the networks")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print what gc would remove, and change nothing")
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
