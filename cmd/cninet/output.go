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

// finish reports how the command ended: the error on stderr (with a hint
// to --help for a usage error), and the result, as text or as the
// envelope. Help and --version, which print themselves and run no
// command, report nothing.
func (c *cli) finish(cmd *cobra.Command, code int, err error) {
	if err == nil && !c.ran {
		return
	}
	if err != nil {
		name := "cninet"
		if cmd != nil {
			name = cmd.CommandPath()
		}
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		fmt.Fprintf(c.stderr, "%s: %s\n", name, msg)
		if code == exitUsage {
			fmt.Fprintf(c.stderr, "Run '%s --help' for usage.\n", name)
		}
	}
	if c.output == outputJSON {
		env := envelope{Command: c.command, OK: code == exitOK, ExitCode: code, Result: c.result}
		if err != nil {
			env.Error = strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		}
		printJSON(c.stdout, env)
		return
	}
	if c.text != nil {
		// Buffered: a table (status --attachments, gc) is written cell by
		// cell, a write(2) each when unbuffered.
		out := bufio.NewWriter(c.stdout)
		c.text(out)
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
