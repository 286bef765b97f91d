package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// statusCommand reports whether every network, or each --network, can
// attach workloads.
func (c *cli) statusCommand() *cobra.Command {
	var n networkFlags
	cmd := &cobra.Command{
		Use:   "status [--conf-dir DIR | --conflist FILE] [--network N]...",
		Short: "Report whether every network (or each --network) can attach workloads",
		Long: `Report whether every network of the conflists, or each --network, can attach
workloads: its conflist is valid and every plugin it names is found.

` + sourcesHelp,
	}
	cmd.RunE = c.runE(func(*cobra.Command) error {
		cfg, err := n.configurator(c.stderr)
		if err != nil {
			return err
		}
		defer cfg.Close()
		defer n.printTrace(c.stderr)
		ctx, cancel := signalContext()
		defer cancel()
		names := []string(n.networks)
		if len(names) == 0 {
			if err := cfg.Status(ctx); err != nil {
				return err
			}
			names = cfg.Networks()
		} else {
			for _, name := range names {
				if err := cfg.StatusOf(ctx, name); err != nil {
					return err
				}
			}
		}
		c.done(map[string]any{"ready": names}, func(w io.Writer) { printReady(w, names) })
		return nil
	})
	n.register(cmd.Flags(), "a network to report on (repeatable; default: every network of the conflists)")
	return cmd
}

func printReady(w io.Writer, names []string) {
	quoted := make([]string, len(names))
	for i, name := range names {
		quoted[i] = strconv.Quote(name)
	}
	if len(quoted) == 1 {
		fmt.Fprintf(w, "ready: network %s\n", quoted[0])
	} else {
		fmt.Fprintf(w, "ready: networks %s\n", strings.Join(quoted, ", "))
	}
}
