package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/buildinfo"
	"github.com/spf13/cobra"
)

// errUsage marks errors of the command line itself: they exit with
// status 2.
var errUsage = errors.New("usage")

// usageErrorf returns a usage error.
func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// The exit codes, the same for every command.
const (
	exitOK      = 0 // success
	exitFailure = 1 // the operation failed
	exitUsage   = 2 // the command line is wrong: nothing was done
)

// exited is returned by a command that already ended the way it must be
// reported (the demo's parent, whose child printed everything): run exits
// with its code and prints nothing more.
type exited int

func (e exited) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs one command line and returns its exit code: 0 success, 1 the
// operation failed, 2 a usage error (cobra's errors in parsing included).
func run(args []string, stdout, stderr io.Writer) int {
	return (&cli{stdout: stdout, stderr: stderr, output: outputText}).run(args)
}

// run runs one command line with c's streams.
func (c *cli) run(args []string) int {
	stdout, stderr := c.stdout, c.stderr
	root := c.root()
	root.SetOut(stdout)
	root.SetErr(stderr)
	if c.stdin != nil {
		root.SetIn(c.stdin)
	}
	if len(args) == 0 {
		root.SetOut(stderr)
		root.Help()
		return exitUsage
	}
	// The format of a usage error's report, before cobra reads the flags
	// (an unknown flag stops it before --output).
	c.output.scan(args)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if cmd != nil && cmd != root {
		c.command = cmd.Name()
	}
	code := exitOK
	var done exited
	switch {
	case errors.As(err, &done):
		return int(done)
	case err == nil:
	case errors.Is(err, errUsage) || !c.ran:
		// Before the command ran, every error is cobra's reading of the
		// command line: an unknown command, flag or argument.
		code = exitUsage
	default:
		code = exitFailure
	}
	c.finish(cmd, code, err)
	return code
}

// cli is one run of the command line: where it writes, in which format,
// and what the command that ran produced.
type cli struct {
	stdin          io.Reader // nil: os.Stdin
	stdout, stderr io.Writer
	output         outputFormat
	command        string // the command that ran, "" for cninet alone
	ran            bool   // the command's own code started
	result         any    // for the JSON envelope
	text           func(io.Writer)
	// tweaks change the Config of the Configurators that shim-del makes
	// (tests inject fake iptables and nftables).
	tweaks []func(*cninet.Config)
}

// root builds the command tree.
func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "cninet",
		Short: "Give network namespaces CNI networking, and leave nothing behind",
		Long: `cninet drives the cninet library outside an orchestrator, for operators
debugging a CNI setup: print the default conflist, attach and detach a
namespace, check it, collect leftovers, and run a self-contained demo. It
also runs the daemon of thick mode, which the cninet-shim CNI plugin
forwards a runtime's requests to.

Exit status: 0 success, 1 the operation failed, 2 a usage error.
With --output json every command prints one JSON envelope on stdout:
  {"command": "gc", "ok": true, "exit_code": 0, "result": {...}}
  {"command": "gc", "ok": false, "exit_code": 2, "error": "..."}`,
		Version:       buildinfo.Version(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("cninet {{.Version}}\n")
	root.PersistentFlags().VarP(&c.output, "output", "o", "output format: text (for people) or json (one envelope, for programs)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	root.AddCommand(c.conflistCommand(), c.setupCommand(), c.teardownCommand(), c.checkCommand(),
		c.connectCommand(), c.disconnectCommand(), c.gcCommand(), c.statusCommand(),
		c.demoCommand(), c.daemonCommand(), c.versionCommand(), c.manCommand(), c.shimDelCommand())
	return root
}

// runE makes a command's RunE: it notes that the command ran (errors
// after that are its own) and rejects arguments (every command takes
// flags only).
func (c *cli) runE(fn func(cmd *cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		c.ran = true
		return fn(cmd)
	}
}

// done records what the command produced: result for the JSON envelope,
// text for people.
func (c *cli) done(result any, text func(io.Writer)) {
	c.result, c.text = result, text
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
