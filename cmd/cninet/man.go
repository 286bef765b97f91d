package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// manCommand writes a man page per command, cninet(1) and
// cninet-COMMAND(1), from the command tree: what help prints, in roff.
// It is written here rather than with cobra/doc, which would link a
// Markdown converter and a YAML library into the binary.
func (c *cli) manCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "man --dir DIR",
		Short: "Write the man pages, cninet(1) and one per command, into a directory",
	}
	cmd.RunE = c.end.runE(func(cmd *cobra.Command) error {
		if dir == "" {
			return usageErrorf("--dir is required")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var written []string
		err := walkCommands(cmd.Root(), func(cc *cobra.Command) error {
			var page bytes.Buffer
			writeManPage(&page, cc)
			path := filepath.Join(dir, strings.ReplaceAll(cc.CommandPath(), " ", "-")+".1")
			written = append(written, path)
			return os.WriteFile(path, page.Bytes(), 0o644)
		})
		if err != nil {
			return err
		}
		c.end.done(map[string]any{"written": written}, func(w io.Writer) {
			for _, p := range written {
				fmt.Fprintln(w, p)
			}
		})
		return nil
	})
	cmd.Flags().StringVar(&dir, "dir", "", "directory to write the pages into (created if missing)")
	return cmd
}

// walkCommands calls fn for cmd and every command below it that help
// lists.
func walkCommands(cmd *cobra.Command, fn func(*cobra.Command) error) error {
	if err := fn(cmd); err != nil {
		return err
	}
	for _, sub := range cmd.Commands() {
		if !sub.IsAvailableCommand() || sub.IsAdditionalHelpTopicCommand() {
			continue
		}
		if err := walkCommands(sub, fn); err != nil {
			return err
		}
	}
	return nil
}

// writeManPage writes cmd's page: name, synopsis, description, options,
// the commands below it and the exit status.
func writeManPage(w io.Writer, cmd *cobra.Command) {
	name := strings.ReplaceAll(cmd.CommandPath(), " ", "-")
	fmt.Fprintf(w, ".TH %s 1 \"\" \"cninet %s\" \"cninet manual\"\n", strings.ToUpper(name), roff(cmd.Root().Version))
	fmt.Fprintf(w, ".SH NAME\n%s \\- %s\n", name, roff(cmd.Short))
	fmt.Fprintf(w, ".SH SYNOPSIS\n.B %s\n", roff(cmd.UseLine()))
	desc := cmd.Long
	if desc == "" {
		desc = cmd.Short
	}
	fmt.Fprintf(w, ".SH DESCRIPTION\n.nf\n%s\n.fi\n", roff(desc))
	if flags := cmd.NonInheritedFlags().FlagUsages(); flags != "" {
		fmt.Fprintf(w, ".SH OPTIONS\n.nf\n%s.fi\n", roff(flags))
	}
	if flags := cmd.InheritedFlags().FlagUsages(); flags != "" {
		fmt.Fprintf(w, ".SH OPTIONS INHERITED FROM CNINET\n.nf\n%s.fi\n", roff(flags))
	}
	var see []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
			fmt.Fprintf(w, "%s.TP\n.B %s\n%s\n", map[bool]string{true: ".SH COMMANDS\n"}[len(see) == 0], roff(sub.Name()), roff(sub.Short))
			see = append(see, fmt.Sprintf("%s-%s(1)", name, sub.Name()))
		}
	}
	fmt.Fprintf(w, ".SH EXIT STATUS\n0 success, 1 the operation failed, 2 a usage error.\n")
	if cmd.HasParent() {
		see = append([]string{strings.ReplaceAll(cmd.Parent().CommandPath(), " ", "-") + "(1)"}, see...)
	}
	if len(see) > 0 {
		fmt.Fprintf(w, ".SH SEE ALSO\n%s\n", roff(strings.Join(see, ", ")))
	}
}

// roff escapes text for a roff page: backslashes, minus signs, and a
// line that would start with a control character.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			lines[i] = `\&` + l
		}
	}
	return strings.Join(lines, "\n")
}
