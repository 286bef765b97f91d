package main

import (
	"fmt"
	"io"

	"github.com/seed1280861d/cninet"
)

// cmdConflist prints the default bridge conflist, or writes it with --write.
func cmdConflist(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("conflist", "[flags]", stderr)
	var b bridgeFlags
	var write string
	fs.StringVar(&b.name, "network", "nomad", "network name")
	b.register(fs)
	fs.StringVar(&write, "write", "", "write <network>.conflist atomically into this directory instead of printing")
	if err := parse(fs, args); err != nil {
		return err
	}
	conf, err := cninet.BridgeConfList(b.config())
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if write == "" {
		_, err = stdout.Write(conf)
		return err
	}
	path, err := cninet.WriteConfList(write, conf)
	if err == nil {
		fmt.Fprintln(stdout, path)
	}
	return err
}
