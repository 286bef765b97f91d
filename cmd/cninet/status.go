package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seed1280861d/cninet"

	"github.com/spf13/cobra"
)

// statusCommand reports whether every network, or each --network, can
// attach workloads.
func (c *cli) statusCommand() *cobra.Command {
	var n networkFlags
	var attachments bool
	cmd := &cobra.Command{
		Use:   "status [--conf-dir DIR | --conflist FILE] [--network N]... [--attachments]",
		Short: "Report whether every network (or each --network) can attach workloads",
		Long: `Report whether every network of the conflists, or each --network, can attach
workloads: its conflist is valid and every plugin it names is found.

With --attachments, list the host registry instead (--state-dir): every
attachment any process on the host made through cninet, whoever its owner,
with its network, interface, addresses, ports and since when; --network
narrows the list. A registry file this cninet cannot read (damaged, or a
newer cninet's record) is listed in state "unreadable", kept as it is,
and named on stderr; no operation acts on its attachment. Attachments of
the networks that libcni's cache holds and no record claims (another
tool's, or from before the registry) follow, owner "-", state
"unrecorded": GC leaves each while its namespace lives.

` + sourcesHelp,
	}
	cmd.RunE = c.runE(func(*cobra.Command) error {
		cfg, err := n.configurator(c.stderr)
		if err != nil {
			return err
		}
		defer cfg.Close()
		defer n.printTrace(c.stderr)
		if attachments {
			return c.listAttachments(cfg, n.networks)
		}
		ctx, cancel := signalContext()
		defer cancel()
		names := []string(n.networks)
		if err := cfg.Status(ctx, names...); err != nil {
			return err
		}
		if len(names) == 0 {
			names = cfg.Networks()
		}
		c.done(map[string]any{"ready": names}, func(w io.Writer) { printReady(w, names) })
		return nil
	})
	n.register(cmd.Flags(), "a network to report on (repeatable; default: every network of the conflists)")
	cmd.Flags().BoolVar(&attachments, "attachments", false, "list the host registry's attachments (owner, network, id, interface, addresses, ports, since)")
	return cmd
}

// listAttachments prints the host registry, narrowed to networks when
// any are named. A record it cannot read is listed as "unreadable" (and
// kept), and named in the error, after the list.
func (c *cli) listAttachments(cfg *cninet.Configurator, networks []string) error {
	recs, err := cfg.Attachments()
	unrecorded, uerr := cfg.Unrecorded()
	if len(networks) > 0 {
		recs = slices.DeleteFunc(recs, func(r cninet.AttachmentRecord) bool { return !slices.Contains(networks, r.Network) })
		unrecorded = slices.DeleteFunc(unrecorded, func(u cninet.UnrecordedAttachment) bool { return !slices.Contains(networks, u.Network) })
	}
	if recs == nil {
		recs = []cninet.AttachmentRecord{}
	}
	if unrecorded == nil {
		unrecorded = []cninet.UnrecordedAttachment{}
	}
	c.done(map[string]any{"attachments": recs, "unrecorded": unrecorded}, func(w io.Writer) { printAttachments(w, recs, unrecorded) })
	return errors.Join(err, uerr)
}

// printAttachments prints the registry's attachments, then those of the
// networks that libcni's cache holds and no record claims (owner "-").
func printAttachments(w io.Writer, recs []cninet.AttachmentRecord, unrecorded []cninet.UnrecordedAttachment) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	defer tw.Flush()
	defer func() {
		for _, u := range unrecorded {
			state := "unrecorded"
			if u.NamespaceGone {
				state += ", namespace gone"
			}
			fmt.Fprintf(tw, "-\t%s\t%s\t%s\t-\t-\t%s\t-\n", u.Network, u.ID, u.IfName, state)
		}
	}()
	fmt.Fprintln(tw, "OWNER\tNETWORK\tID\tINTERFACE\tADDRESSES\tPORTS\tSTATE\tSINCE")
	for _, r := range recs {
		addrs := make([]string, len(r.Addresses))
		for i, a := range r.Addresses {
			addrs[i] = a.String()
		}
		var ports []string
		for _, p := range r.Ports {
			ports = append(ports, fmt.Sprintf("%d:%d/%s", p.HostPort, p.ContainerPort, p.Protocol))
		}
		id := r.ID
		if r.RuntimeID != "" { // a delegate id: say whose
			id += " (of " + r.RuntimeID + ")"
		}
		since := r.Since.UTC().Format(time.RFC3339)
		if r.Unreadable != "" { // kept: whose it is and since when are unknown
			since = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(r.Owner), orDash(r.Network), id, orDash(r.IfName),
			orDash(strings.Join(addrs, ",")), orDash(strings.Join(ports, ",")), r.State, since)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
