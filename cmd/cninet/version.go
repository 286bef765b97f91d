package main

import (
	"fmt"
	"io"

	"github.com/seed1280861d/cninet/internal/buildinfo"
	"github.com/spf13/cobra"
)

// versionCommand prints cninet's version, as --version does.
func (c *cli) versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print cninet's version (as --version does)",
	}
	cmd.RunE = c.end.runE(func(*cobra.Command) error {
		v := buildinfo.Version()
		c.end.done(map[string]any{"version": v}, func(w io.Writer) { fmt.Fprintf(w, "cninet %s\n", v) })
		return nil
	})
	return cmd
}
