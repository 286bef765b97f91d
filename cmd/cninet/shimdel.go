package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/seed1280861d/cninet/internal/thick"
	"github.com/seed1280861d/cninet/internal/thickwire"
	"github.com/spf13/cobra"
)

// shimDelCommand is the hidden `cninet shim-del`, which cninet-shim runs
// when the daemon gives a DEL no answer (thickwire.ShimDelCommand): the
// request on stdin, --socket the daemon's, --timeout the shim config's
// (the DEL's deadline: the shim kills a shim-del that outlives it), --why
// what the shim saw. It prints nothing and exits 0 when the DEL
// succeeded; else it prints the CNI error the runtime gets (as the
// shim's own) and exits 1. It is hidden: only the shim runs it.
func (c *cli) shimDelCommand() *cobra.Command {
	var socket, why string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:    thickwire.ShimDelCommand,
		Short:  "Run a DEL that the daemon gave no answer to, for cninet-shim (request on stdin)",
		Hidden: true,
		RunE: c.end.runE(func(cmd *cobra.Command) error {
			if !filepath.IsAbs(socket) || filepath.Clean(socket) != socket {
				return usageErrorf("--socket %q, want the clean absolute path of the daemon's socket", socket)
			}
			if timeout <= 0 {
				return usageErrorf("--timeout %s, want a duration above zero (the shim config's \"timeout\")", timeout)
			}
			ctx, cancel := signalContext()
			defer cancel()
			ctx, cancelDel := context.WithTimeout(ctx, timeout)
			defer cancelDel()
			err := thick.DelForShim(ctx, socket, cmd.InOrStdin(), c.tweaks...)
			if err == nil {
				return nil
			}
			b, _ := json.MarshalIndent(thick.ErrorFor(fmt.Errorf("cninet-shim: %s; the DEL run by cninet instead failed: %w", why, err)), "", "    ")
			c.stdout.Write(b)
			return exited(exitFailure)
		}),
	}
	cmd.Flags().StringVar(&socket, "socket", "", "the daemon's socket (its info file is beside it)")
	cmd.Flags().DurationVar(&timeout, "timeout", thickwire.DefaultTimeout, "the DEL's deadline: the shim config's \"timeout\"")
	cmd.Flags().StringVar(&why, "why", "", "why the daemon gave no answer, for the error message")
	return cmd
}
