package main

import (
	"fmt"
	"io"
	"strings"
)

// cmdGC removes every attachment whose id is not in --live (none with
// --none-live) and prints the report as JSON.
func cmdGC(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gc", "--live ID,ID,... [flags]", stderr)
	var n networkFlags
	n.register(fs)
	// A long GC logs its progress at Info: show it unless told otherwise.
	n.logLevel, fs.Lookup("log-level").DefValue = "info", "info"
	live := fs.String("live", "", "comma-separated ids of the live allocations (required; \"\" with --none-live)")
	noneLive := fs.Bool("none-live", false, "nothing is live: collect every attachment of the networks")
	if err := parse(fs, args); err != nil {
		return err
	}
	ids := []string{}
	switch {
	case *live != "" && *noneLive:
		return fmt.Errorf("%w: --live and --none-live exclude each other", errUsage)
	case *live != "":
		ids = strings.Split(*live, ",")
	case !*noneLive:
		return fmt.Errorf("%w: --live is required (or --none-live)", errUsage)
	}
	c, err := n.configurator(stderr)
	if err != nil {
		return err
	}
	defer c.Close()
	defer n.printTrace(stderr)
	ctx, cancel := signalContext()
	defer cancel()
	report, err := c.GC(ctx, ids)
	if report != nil {
		printJSON(stdout, report)
	}
	return err
}
