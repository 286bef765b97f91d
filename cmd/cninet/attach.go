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
	cmd.RunE = c.end.runE(func(*cobra.Command) error {
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
			c.end.done(out, func(w io.Writer) { printStatus(w, alloc.ID, "", st) })
			return nil
		})
}

// statusJSON is the first network's interface, addresses and DNS, and,
// for a workload in several networks, "networks": each network's, with
// its "network" name.
func statusJSON(st *cninet.NetworkStatus) map[string]any {
	out := interfaceJSON(cninet.InterfaceStatus{IfName: st.IfName, Address: st.Address, AddressIPv6: st.AddressIPv6, DNS: st.DNS})
	if len(st.Interfaces) > 1 {
		nets := make([]map[string]any, len(st.Interfaces))
		for i, n := range st.Interfaces {
			nets[i] = interfaceJSON(n)
			nets[i]["network"] = n.Network
		}
		out["networks"] = nets
	}
	return out
}

func interfaceJSON(n cninet.InterfaceStatus) map[string]any {
	out := map[string]any{"interface": n.IfName, "address": n.Address.String()}
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
	nets := st.Interfaces
	if len(nets) == 0 {
		nets = []cninet.InterfaceStatus{{Network: network, IfName: st.IfName, Address: st.Address, AddressIPv6: st.AddressIPv6}}
	}
	for _, n := range nets {
		line := fmt.Sprintf("%s: %s %s", id, n.IfName, n.Address)
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
			c.end.done(map[string]any{"id": alloc.ID}, func(w io.Writer) { fmt.Fprintf(w, "%s: detached\n", alloc.ID) })
			return nil
		})
}

func (c *cli) checkCommand() *cobra.Command {
	var repair bool
	cmd := c.attachCommand("check --id ID --netns PATH [-p host:container[/proto]]... [--repair]",
		"Check every network of an attachment against what its plugins wrote, then with CNI CHECK", true,
		func(ctx context.Context, cfg *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			err := cfg.Check(ctx, alloc, netns, cninet.CheckOptions{Repair: repair})
			if errors.Is(err, cninet.ErrCheckUnsupported) && !errors.Is(err, cninet.ErrCheckFailed) {
				fmt.Fprintf(c.stderr, "cninet check: warning: %v\n", err)
				c.end.done(map[string]any{"id": alloc.ID, "checked": false, "warning": err.Error()}, func(w io.Writer) { fmt.Fprintln(w, "not checked") })
				return nil
			}
			if de := driftOf(err); de != nil {
				c.end.done(map[string]any{"id": alloc.ID, "checked": true, "drift": de.Drifts}, func(w io.Writer) { printDrifts(w, de.Drifts) })
			}
			if err != nil {
				return err
			}
			c.end.done(map[string]any{"id": alloc.ID, "checked": true}, func(w io.Writer) { fmt.Fprintln(w, "ok") })
			return nil
		})
	cmd.Long += `

It first compares each attachment with what its plugins wrote for it (the
host registry records it): rules and chains, reservations, libcni's cached
result, the workload's interface and the host's end of its veth, and names
what is missing; then it runs the plugins' CHECK where that plugin release's
CHECK is sound. With --repair, what is missing is restored in place (the
plugins' own ADD writes what they wrote) and the check passes once the
attachment is whole again; what cannot be restored in place (the workload's
interface or namespace is gone) fails, saying to re-create the workload.`
	cmd.Flags().BoolVar(&repair, "repair", false, "restore what is missing, in place")
	return cmd
}

// driftOf returns the DriftError in err, or nil.
func driftOf(err error) *cninet.DriftError {
	var de *cninet.DriftError
	if errors.As(err, &de) {
		return de
	}
	return nil
}

// printDrifts writes what each attachment misses, a line each piece.
func printDrifts(w io.Writer, drifts []cninet.Drift) {
	for _, d := range drifts {
		fmt.Fprintf(w, "%s in network %q as %s: %d missing\n", d.ID, d.Network, d.IfName, len(d.Missing))
		for _, m := range d.Missing {
			fmt.Fprintf(w, "  %s\n", m)
		}
		if len(d.Unrepairable) > 0 {
			fmt.Fprintf(w, "  %d cannot be restored in place: re-create the workload\n", len(d.Unrepairable))
		}
	}
}
