package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: cninet <command> [flags]

Commands:
  conflist   print (or write) the default bridge conflist
  setup      attach a network namespace to each --network and print its status as JSON
  teardown   detach a network namespace and remove what the plugins left
  connect    attach a live workload to one more network of --conf-dir
  disconnect detach a live workload from one network, leaving the others
  check      run CNI CHECK on every network of an attachment
  gc         remove every attachment whose id is not live, in every network
  status     report whether every network can attach workloads
  demo       run the whole story in throwaway namespaces and report
  daemon     serve the cninet-shim CNI plugin on a unix socket (thick mode)

Run 'cninet <command> --help' for a command's flags.
`

// errUsage marks errors that should exit with status 2.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	commands := map[string]func([]string, io.Writer, io.Writer) error{
		"conflist": cmdConflist, "setup": cmdSetup, "teardown": cmdTeardown,
		"check": cmdCheck, "gc": cmdGC, "status": cmdStatus, "demo": cmdDemo,
		"connect": cmdConnect, "disconnect": cmdDisconnect, "daemon": cmdDaemon,
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "cninet: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd(args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "cninet %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "cninet %s: %v\n", args[0], err)
		return 1
	}
}

// newFlags returns a flag set whose parse errors are usage errors.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: cninet %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
