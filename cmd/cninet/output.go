package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// envelope is what every command prints with --output json: one JSON
// object on stdout, whatever the command and however it ended.
//
//	{
//	  "command":   "gc",       // the command that ran ("" for cninet alone)
//	  "ok":        true,       // exit_code == 0
//	  "exit_code": 0,          // 0 success, 1 the operation failed, 2 a usage error
//	  "result":    {...},      // the command's result; absent when it has none,
//	                           // present beside an error when it is partial (gc)
//	  "error":     "..."       // absent when ok
//	}
//
// The results, by command:
//
//	conflist         {"conflist": {...}} or, with --write, {"path": "..."}
//	setup, connect   {"interface", "address", "address_ipv6"?, "dns"?, "networks"?: [...]}
//	                 (connect adds "network")
//	teardown         {"id": "..."}
//	disconnect       {"id": "...", "network": "..."}
//	check            {"id": "...", "checked": true} or "checked": false with "warning"
//	gc               {"removed": [{"kind", "id", "network"?, "backend"?, "detail"}], "unreadable"?: ["path", ...]}
//	gc --dry-run     {"dry_run": true, "would_remove": [items as gc's]}
//	status           {"ready": ["network", ...]}
//	status --attachments {"attachments": [{"Owner", "Network", "ID", "IfName", "NetNS", "State", "Addresses", "Ports", "Since", "Unreadable"}, ...],
//	                      "unrecorded": [{"Network", "ID", "IfName", "NetNS", "NamespaceGone"}, ...]}
//	demo             {"steps": [{"step", "detail", "took_ms"?}], "leaks": [...]}
//	version          {"version": "..."}
//	man              {"written": ["path", ...]}
//	daemon           none
//
// Help, shell completion and --version print text in either format: they
// are for people and shells. Errors are also written to stderr, as text.
type envelope struct {
	Command  string `json:"command"`
	OK       bool   `json:"ok"`
	ExitCode int    `json:"exit_code"`
	Result   any    `json:"result,omitempty"`
	Error    string `json:"error,omitempty"`
}

// outputFormat is the --output flag.
type outputFormat string

const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
)

func (o *outputFormat) String() string { return string(*o) }
func (o *outputFormat) Type() string   { return "text|json" }

func (o *outputFormat) Set(v string) error {
	switch f := outputFormat(strings.ToLower(strings.TrimSpace(v))); f {
	case outputText, outputJSON:
		*o = f
		return nil
	}
	return fmt.Errorf("%q: want text or json", v)
}

// scan sets o from the --output or -o in args, ignoring errors (cobra
// reports them): for the errors cobra meets before it reads --output.
func (o *outputFormat) scan(args []string) {
	for i, a := range args {
		if a == "--" {
			return
		}
		v, ok := strings.CutPrefix(a, "--output=")
		if !ok {
			v, ok = strings.CutPrefix(a, "-o")
			v = strings.TrimPrefix(v, "=")
		}
		if (a == "--output" || a == "-o") && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if ok {
			_ = o.Set(v)
		}
	}
}

// outcome is how one run of the command line ends: the format it
// reports in, the command that ran, and what that command produced.
type outcome struct {
	output  outputFormat
	command string          // the command that ran, "" for cninet alone
	ran     bool            // the command's own code started
	result  any             // for the JSON envelope
	text    func(io.Writer) // for people
}

// runE makes a command's RunE: it notes that the command ran (errors
// after that are its own) and rejects arguments (every command takes
// flags only).
func (o *outcome) runE(fn func(cmd *cobra.Command) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unexpected argument %q", args[0])
		}
		o.ran = true
		return fn(cmd)
	}
}

// done records what the command produced: result for the JSON envelope,
// text for people.
func (o *outcome) done(result any, text func(io.Writer)) {
	o.result, o.text = result, text
}

// finish reports how the command ended: the error on stderr (with a hint
// to --help for a usage error), and the result on stdout, as text or as
// the envelope. Help and --version, which print themselves and run no
// command, report nothing.
func (o *outcome) finish(stdout, stderr io.Writer, cmd *cobra.Command, code int, err error) {
	if err == nil && !o.ran {
		return
	}
	if err != nil {
		name := "cninet"
		if cmd != nil {
			name = cmd.CommandPath()
		}
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		fmt.Fprintf(stderr, "%s: %s\n", name, msg)
		if code == exitUsage {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", name)
		}
	}
	if o.output == outputJSON {
		env := envelope{Command: o.command, OK: code == exitOK, ExitCode: code, Result: o.result}
		if err != nil {
			env.Error = strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		}
		printJSON(stdout, env)
		return
	}
	if o.text != nil {
		// Buffered: a table (status --attachments, gc) is written cell by
		// cell, a write(2) each when unbuffered.
		out := bufio.NewWriter(stdout)
		o.text(out)
		out.Flush()
	}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
