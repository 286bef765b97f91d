package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// cmdStatus reports whether every network can attach workloads.
func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "[flags]", stderr)
	var n networkFlags
	n.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := n.configurator(stderr)
	if err != nil {
		return err
	}
	defer c.Close()
	defer n.printTrace(stderr)
	ctx, cancel := signalContext()
	defer cancel()
	if err := c.Status(ctx); err != nil {
		return err
	}
	names := c.Networks()
	for i, name := range names {
		names[i] = strconv.Quote(name)
	}
	if len(names) == 1 {
		fmt.Fprintf(stdout, "ready: network %s\n", names[0])
	} else {
		fmt.Fprintf(stdout, "ready: networks %s\n", strings.Join(names, ", "))
	}
	return nil
}
