package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/seed1280861d/cninet"
)

// attachCommand parses the flags of a command on one attachment and runs
// fn with a Configurator, the allocation and the namespace path.
func attachCommand(name, synopsis string, needNetns bool, args []string, stderr io.Writer,
	fn func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error) error {
	fs := newFlags(name, synopsis, stderr)
	var a attachFlags
	a.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	alloc, err := a.allocation(needNetns)
	if err != nil {
		return err
	}
	c, err := a.configurator(stderr)
	if err != nil {
		return err
	}
	defer c.Close()
	defer a.printTrace(stderr)
	ctx, cancel := signalContext()
	defer cancel()
	return fn(ctx, c, alloc, a.netns)
}

// cmdSetup attaches a namespace to each --network and prints its status.
func cmdSetup(args []string, stdout, stderr io.Writer) error {
	return attachCommand("setup", "--id ID --netns PATH [-p host:container[/proto]]... [flags]", true, args, stderr,
		func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			st, err := c.Setup(ctx, alloc, netns)
			if err != nil {
				return err
			}
			return printJSON(stdout, statusJSON(st))
		})
}

// statusJSON is the first network's interface, addresses and DNS, and,
// for a workload in several networks, "networks": each network's, with
// its "network" name.
func statusJSON(st *cninet.NetworkStatus) map[string]any {
	out := attachmentJSON(cninet.AttachmentStatus{InterfaceName: st.InterfaceName, Address: st.Address, AddressIPv6: st.AddressIPv6, DNS: st.DNS})
	if len(st.Networks) > 1 {
		nets := make([]map[string]any, len(st.Networks))
		for i, n := range st.Networks {
			nets[i] = attachmentJSON(n)
			nets[i]["network"] = n.Network
		}
		out["networks"] = nets
	}
	return out
}

func attachmentJSON(n cninet.AttachmentStatus) map[string]any {
	out := map[string]any{"interface": n.InterfaceName, "address": n.Address.String()}
	if n.AddressIPv6.IsValid() {
		out["address_ipv6"] = n.AddressIPv6.String()
	}
	if n.DNS != nil {
		out["dns"] = n.DNS
	}
	return out
}

// cmdTeardown detaches a namespace and removes what the plugins left.
func cmdTeardown(args []string, stdout, stderr io.Writer) error {
	return attachCommand("teardown", "--id ID [--netns PATH] [-p host:container[/proto]]... [flags]", false, args, stderr,
		func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			return c.Teardown(ctx, alloc, netns)
		})
}

// cmdCheck runs CNI CHECK on every network of an attachment.
func cmdCheck(args []string, stdout, stderr io.Writer) error {
	return attachCommand("check", "--id ID --netns PATH [-p host:container[/proto]]... [flags]", true, args, stderr,
		func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			err := c.Check(ctx, alloc, netns)
			if errors.Is(err, cninet.ErrCheckUnsupported) {
				fmt.Fprintf(stderr, "cninet check: warning: %v\n", err)
				fmt.Fprintln(stdout, "not checked")
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, "ok")
			return nil
		})
}
