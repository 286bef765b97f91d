package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/seed1280861d/cninet"
	"github.com/spf13/cobra"
)

// attachCommand makes a command on one attachment: it parses the flags
// and runs fn with a Configurator, the allocation and the namespace path,
// printing the --trace tree after it.
func (c *cli) attachCommand(use, short string, needNetns bool,
	fn func(ctx context.Context, cfg *cninet.Configurator, alloc *cninet.Allocation, netns string) error) *cobra.Command {
	var a attachFlags
	cmd := &cobra.Command{Use: use, Short: short, Long: short + ".\n\n" + sourcesHelp}
	cmd.RunE = c.runE(func(*cobra.Command) error {
		alloc, err := a.allocation(needNetns)
		if err != nil {
			return err
		}
		cfg, err := a.configurator(c.stderr)
		if err != nil {
			return err
		}
		defer cfg.Close()
		defer a.printTrace(c.stderr)
		ctx, cancel := signalContext()
		defer cancel()
		return fn(ctx, cfg, alloc, a.netns)
	})
	a.register(cmd.Flags(), attachNetworkUsage)
	return cmd
}

func (c *cli) setupCommand() *cobra.Command {
	return c.attachCommand("setup --id ID --netns PATH [-p host:container[/proto]]...",
		"Attach a network namespace to each --network and print its addresses", true,
		func(ctx context.Context, cfg *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			st, err := cfg.Setup(ctx, alloc, netns)
			if err != nil {
				return err
			}
			out := statusJSON(st)
			c.done(out, func(w io.Writer) { printStatus(w, alloc.ID, "", st) })
			return nil
		})
}

// statusJSON is the first network's interface, addresses and DNS, and,
// for a workload in several networks, "networks": each network's, with
// its "network" name.
func statusJSON(st *cninet.NetworkStatus) map[string]any {
	out := attachmentJSON(cninet.Attachment{InterfaceName: st.InterfaceName, Address: st.Address, AddressIPv6: st.AddressIPv6, DNS: st.DNS})
	if len(st.Attachments) > 1 {
		nets := make([]map[string]any, len(st.Attachments))
		for i, n := range st.Attachments {
			nets[i] = attachmentJSON(n)
			nets[i]["network"] = n.Network
		}
		out["networks"] = nets
	}
	return out
}

func attachmentJSON(n cninet.Attachment) map[string]any {
	out := map[string]any{"interface": n.InterfaceName, "address": n.Address.String()}
	if n.AddressIPv6.IsValid() {
		out["address_ipv6"] = n.AddressIPv6.String()
	}
	if n.DNS != nil {
		out["dns"] = n.DNS
	}
	return out
}

// printStatus writes an attachment's status for people: a line per
// network, the interface and addresses.
func printStatus(w io.Writer, id, network string, st *cninet.NetworkStatus) {
	nets := st.Attachments
	if len(nets) == 0 {
		nets = []cninet.Attachment{{Network: network, InterfaceName: st.InterfaceName, Address: st.Address, AddressIPv6: st.AddressIPv6}}
	}
	for _, n := range nets {
		line := fmt.Sprintf("%s: %s %s", id, n.InterfaceName, n.Address)
		if n.AddressIPv6.IsValid() {
			line += " " + n.AddressIPv6.String()
		}
		if n.Network != "" {
			line += fmt.Sprintf(" (network %q)", n.Network)
		}
		fmt.Fprintln(w, line)
	}
}

func (c *cli) teardownCommand() *cobra.Command {
	return c.attachCommand("teardown --id ID [--netns PATH] [-p host:container[/proto]]...",
		"Detach a network namespace and remove what the plugins left", false,
		func(ctx context.Context, cfg *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			if err := cfg.Teardown(ctx, alloc, netns); err != nil {
				return err
			}
			c.done(map[string]any{"id": alloc.ID}, func(w io.Writer) { fmt.Fprintf(w, "%s: detached\n", alloc.ID) })
			return nil
		})
}

func (c *cli) checkCommand() *cobra.Command {
	return c.attachCommand("check --id ID --netns PATH [-p host:container[/proto]]...",
		"Run CNI CHECK on every network of an attachment", true,
		func(ctx context.Context, cfg *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			err := cfg.Check(ctx, alloc, netns)
			if errors.Is(err, cninet.ErrCheckUnsupported) {
				fmt.Fprintf(c.stderr, "cninet check: warning: %v\n", err)
				c.done(map[string]any{"id": alloc.ID, "checked": false, "warning": err.Error()}, func(w io.Writer) { fmt.Fprintln(w, "not checked") })
				return nil
			}
			if err != nil {
				return err
			}
			c.done(map[string]any{"id": alloc.ID, "checked": true}, func(w io.Writer) { fmt.Fprintln(w, "ok") })
			return nil
		})
}
