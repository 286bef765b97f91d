package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/seed1280861d/cninet"
	"github.com/spf13/cobra"
)

// conflistCommand prints the default bridge conflist, or writes it with
// --write. It is the one command with the bridge flags: the others load
// what it wrote with --conf-dir or --conflist.
func (c *cli) conflistCommand() *cobra.Command {
	var b bridgeFlags
	var write string
	cmd := &cobra.Command{
		Use:   "conflist [--network N] [--subnet CIDR] ... [--write DIR]",
		Short: "Print (or write) the default bridge conflist",
		Long: `Print the default bridge conflist (loopback, bridge, firewall, portmap), shaped
by the flags, or write it as <network>.conflist into a directory, for the other
commands' --conf-dir.`,
	}
	cmd.RunE = c.end.runE(func(*cobra.Command) error {
		conf, err := cninet.BridgeConfList(b.config())
		if err != nil {
			return usageErrorf("%v", err)
		}
		if write == "" {
			c.end.done(map[string]any{"conflist": json.RawMessage(conf)}, func(w io.Writer) { w.Write(conf) })
			return nil
		}
		path, err := cninet.WriteConfList(write, conf)
		if err != nil {
			return err
		}
		c.end.done(map[string]any{"path": path}, func(w io.Writer) { fmt.Fprintln(w, path) })
		return nil
	})
	b.register(cmd.Flags())
	cmd.Flags().StringVar(&write, "write", "", "write <network>.conflist atomically into this `directory` instead of printing")
	return cmd
}
