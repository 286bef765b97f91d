package main

import (
	"context"
	"fmt"
	"io"

	"github.com/seed1280861d/cninet"
	"github.com/spf13/cobra"
)

// oneNetworkCommand makes connect and disconnect: one network of --conf-dir,
// on a live workload. The workload's other networks are what libcni's
// cache knows of its id, so the command need not be told them.
func (c *cli) oneNetworkCommand(use, short string, needNetns bool,
	fn func(ctx context.Context, cfg *cninet.Configurator, alloc *cninet.Allocation, network, netns string) error) *cobra.Command {
	var a attachFlags
	cmd := &cobra.Command{Use: use, Short: short}
	cmd.RunE = c.end.runE(func(cmd *cobra.Command) error {
		if a.confDir == "" {
			return usageErrorf("--conf-dir is required (the network to %s is one of its conflists)", cmd.Name())
		}
		if len(a.networks) != 1 {
			return usageErrorf("give exactly one --network to %s (got %d)", cmd.Name(), len(a.networks))
		}
		network := a.networks[0]
		alloc, err := a.allocation(needNetns)
		if err != nil {
			return err
		}
		a.networks = nil // the Configurator's default network stays the first in --conf-dir
		cfg, err := a.configurator(c.stderr)
		if err != nil {
			return err
		}
		defer cfg.Close()
		defer a.printTrace(c.stderr)
		ctx, cancel := signalContext()
		defer cancel()
		return fn(ctx, cfg, alloc, network, a.netns)
	})
	a.register(cmd.Flags(), "the network of --conf-dir to "+cmd.Name()+" (required, once)")
	return cmd
}

func (c *cli) connectCommand() *cobra.Command {
	return c.oneNetworkCommand("connect --conf-dir DIR --network N --id ID --netns PATH [-p host:container[/proto]]...",
		"Attach a live workload to one more network of --conf-dir", true,
		func(ctx context.Context, cfg *cninet.Configurator, alloc *cninet.Allocation, network, netns string) error {
			st, err := cfg.Connect(ctx, alloc, network, netns)
			if err != nil {
				return err
			}
			out := statusJSON(st)
			out["network"] = network
			c.end.done(out, func(w io.Writer) { printStatus(w, alloc.ID, network, st) })
			return nil
		})
}

func (c *cli) disconnectCommand() *cobra.Command {
	return c.oneNetworkCommand("disconnect --conf-dir DIR --network N --id ID [--netns PATH] [-p host:container[/proto]]...",
		"Detach a live workload from one network, leaving the others", false,
		func(ctx context.Context, cfg *cninet.Configurator, alloc *cninet.Allocation, network, netns string) error {
			if err := cfg.Disconnect(ctx, alloc, network, netns); err != nil {
				return err
			}
			c.end.done(map[string]any{"id": alloc.ID, "network": network},
				func(w io.Writer) { fmt.Fprintf(w, "%s: detached from network %q\n", alloc.ID, network) })
			return nil
		})
}
