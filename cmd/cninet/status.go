package main

import (
	"context"
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
with its network, interface, addresses, ports, since when and its health:
"whole", or how many pieces of what its plugins wrote are missing, each
named (a drift check, in one read of the host; cninet check --repair
restores them); --network narrows the list. A registry file this cninet
cannot read (damaged, or a newer cninet's record) is listed in state
"unreadable", kept as it is, and named on stderr; no operation acts on its
attachment. Attachments of the networks that libcni's cache holds and no
record claims (another tool's, or from before the registry) follow, owner
"-", state "unrecorded": GC leaves each while its namespace lives.

` + sourcesHelp,
	}
	cmd.RunE = c.end.runE(func(*cobra.Command) error {
		cfg, err := n.configurator(c.stderr)
		if err != nil {
			return err
		}
		defer cfg.Close()
		defer n.printTrace(c.stderr)
		if attachments {
			ctx, cancel := signalContext()
			defer cancel()
			return c.listAttachments(ctx, cfg, n.networks)
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
		c.end.done(map[string]any{"ready": names}, func(w io.Writer) { printReady(w, names) })
		return nil
	})
	n.register(cmd.Flags(), "a network to report on (repeatable; default: every network of the conflists)")
	cmd.Flags().BoolVar(&attachments, "attachments", false, "list the host registry's attachments (owner, network, id, interface, addresses, ports, since)")
	return cmd
}

// listAttachments prints the host registry, narrowed to networks when
// any are named, with each attachment's health; then the attachments
// libcni's cache holds that no record claims. A record it cannot read is
// listed as "unreadable" (and kept), and named in the error, after the
// list.
func (c *cli) listAttachments(ctx context.Context, cfg *cninet.Configurator, networks []string) error {
	recs, err := cfg.Attachments()
	unrecorded, uerr := cfg.Unrecorded()
	if len(networks) > 0 {
		recs = slices.DeleteFunc(recs, func(r cninet.AttachmentRecord) bool { return !slices.Contains(networks, r.Network) })
		unrecorded = slices.DeleteFunc(unrecorded, func(u cninet.UnrecordedAttachment) bool { return !slices.Contains(networks, u.Network) })
	}
	drifts, derr := cfg.Drifts(ctx)
	out := make([]attachmentHealth, len(recs))
	for i, r := range recs {
		out[i] = attachmentHealth{AttachmentRecord: r}
		if i := slices.IndexFunc(drifts, func(d cninet.Drift) bool { return d.ID == r.ID && d.Network == r.Network && d.IfName == r.IfName }); i >= 0 {
			d := drifts[i]
			out[i].Health = &health{Whole: len(d.Missing) == 0 && d.Incomplete == "", Missing: d.Missing, Unrepairable: d.Unrepairable,
				Incomplete: d.Incomplete}
		}
	}
	if unrecorded == nil {
		unrecorded = []cninet.UnrecordedAttachment{}
	}
	c.end.done(map[string]any{"attachments": out, "unrecorded": unrecorded}, func(w io.Writer) { printAttachments(w, out, unrecorded) })
	if err != nil { // Drifts names the same unreadable records again
		derr = nil
	}
	return errors.Join(err, uerr, derr)
}

// attachmentHealth is a record as status --attachments shows it.
type attachmentHealth struct {
	cninet.AttachmentRecord
	Health *health `json:"health,omitempty"` // nil: not attached, so not checked
}

// health is what a drift check found of one attachment.
type health struct {
	Whole        bool     `json:"whole"`
	Missing      []string `json:"missing,omitempty"`
	Unrepairable []string `json:"unrepairable,omitempty"`
	Incomplete   string   `json:"incomplete,omitempty"`
}

func (h *health) String() string {
	switch {
	case h == nil:
		return "-"
	case h.Whole:
		return "whole"
	case len(h.Missing) == 0:
		return "unknown: " + h.Incomplete
	}
	s := fmt.Sprintf("%d missing: %s", len(h.Missing), strings.Join(h.Missing, "; "))
	if len(h.Unrepairable) > 0 {
		s += fmt.Sprintf(" (%d not repairable in place)", len(h.Unrepairable))
	}
	return s
}

// printAttachments prints the registry's attachments with their health,
// then those of the networks that libcni's cache holds and no record
// claims (owner "-").
func printAttachments(w io.Writer, recs []attachmentHealth, unrecorded []cninet.UnrecordedAttachment) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	defer tw.Flush()
	defer func() {
		for _, u := range unrecorded {
			state := "unrecorded"
			if u.NamespaceGone {
				state += ", namespace gone"
			}
			fmt.Fprintf(tw, "-\t%s\t%s\t%s\t-\t-\t%s\t-\t-\n", u.Network, u.ID, u.IfName, state)
		}
	}()
	fmt.Fprintln(tw, "OWNER\tNETWORK\tID\tINTERFACE\tADDRESSES\tPORTS\tSTATE\tSINCE\tHEALTH")
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(r.Owner), orDash(r.Network), id, orDash(r.IfName),
			orDash(strings.Join(addrs, ",")), orDash(strings.Join(ports, ",")), r.State, since, r.Health)
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
