package main

import (
	"context"
	"fmt"
	"io"

	"github.com/seed1280861d/cninet"
)

// connectCommand parses the flags of connect and disconnect: one network
// of --conf-dir, on a live workload. The workload's other networks are
// what libcni's cache knows of its id, so the command need not be told
// them.
func connectCommand(name, synopsis string, needNetns bool, args []string, stderr io.Writer,
	fn func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, network, netns string) error) error {
	fs := newFlags(name, synopsis, stderr)
	var a attachFlags
	a.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if a.confDir == "" {
		return fmt.Errorf("%w: --conf-dir is required (the network to %s is one of its conflists)", errUsage, name)
	}
	if len(a.networks) != 1 {
		return fmt.Errorf("%w: give exactly one --network to %s (got %d)", errUsage, name, len(a.networks))
	}
	network := a.networks[0]
	alloc, err := a.allocation(needNetns)
	if err != nil {
		return err
	}
	a.networks = nil // the Configurator's default network stays the first in --conf-dir
	c, err := a.configurator(stderr)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := signalContext()
	defer cancel()
	return fn(ctx, c, alloc, network, a.netns)
}

// cmdConnect attaches a live workload to one more network of --conf-dir.
func cmdConnect(args []string, stdout, stderr io.Writer) error {
	return connectCommand("connect", "--conf-dir DIR --network N --id ID --netns PATH [-p host:container[/proto]]... [flags]", true, args, stderr,
		func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, network, netns string) error {
			st, err := c.Connect(ctx, alloc, network, netns)
			if err != nil {
				return err
			}
			out := statusJSON(st)
			out["network"] = network
			return printJSON(stdout, out)
		})
}

// cmdDisconnect detaches a live workload from one network.
func cmdDisconnect(args []string, stdout, stderr io.Writer) error {
	return connectCommand("disconnect", "--conf-dir DIR --network N --id ID [--netns PATH] [-p host:container[/proto]]... [flags]", false, args, stderr,
		func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, network, netns string) error {
			return c.Disconnect(ctx, alloc, network, netns)
		})
}
