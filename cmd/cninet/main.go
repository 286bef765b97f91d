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
	return (&cli{stdout: stdout, stderr: stderr, end: outcome{output: outputText}}).run(args)
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
	c.end.output.scan(args)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if cmd != nil && cmd != root {
		c.end.command = cmd.Name()
	}
	code := exitOK
	var done exited
	switch {
	case errors.As(err, &done):
		return int(done)
	case err == nil:
	case errors.Is(err, errUsage) || !c.end.ran:
		// Before the command ran, every error is cobra's reading of the
		// command line: an unknown command, flag or argument.
		code = exitUsage
	default:
		code = exitFailure
	}
	c.end.finish(c.stdout, c.stderr, cmd, code, err)
	return code
}

// cli is one run of the command line: where it reads and writes, what
// the Configurators it makes are given, and how the run ends (end).
type cli struct {
	stdin          io.Reader // nil: os.Stdin
	stdout, stderr io.Writer
	end            outcome
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
	root.PersistentFlags().VarP(&c.end.output, "output", "o", "output format: text (for people) or json (one envelope, for programs)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %v", errUsage, err) })
	root.AddCommand(c.conflistCommand(), c.setupCommand(), c.teardownCommand(), c.checkCommand(),
		c.connectCommand(), c.disconnectCommand(), c.gcCommand(), c.statusCommand(),
		c.demoCommand(), c.daemonCommand(), c.versionCommand(), c.manCommand(), c.shimDelCommand())
	return root
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
