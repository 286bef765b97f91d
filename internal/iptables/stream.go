package iptables

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// A GC sweep lists every table with iptables-save, whose output at ten
// thousand leaked attachments runs to tens of megabytes per family.
// Reading it whole, then splitting it, then parsing the pieces held three
// copies at once; read as a stream, only the parsed rules of the tables
// cleanup looks at are kept.

// maxSaveLine bounds one line of iptables-save output (a rule with a
// 255-byte comment and many matches stays far below it).
const maxSaveLine = 1 << 20

// SaveEach implements SaveStreamer.
func (h *hostIPTables) SaveEach(tables []string, each func(table string, line []byte)) error {
	if h.save == "" {
		return errors.New("iptables-save not found")
	}
	var stderr bytes.Buffer
	ctx := h.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	cmd := exec.CommandContext(ctx, h.save) // iptables-save takes no lock: only ctx bounds it
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", h.save, err)
	}
	scanErr := readSave(out, tables, each)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s: %w: %s", h.save, err, strings.TrimSpace(stderr.String()))
	}
	if scanErr != nil {
		return fmt.Errorf("%s: reading its output: %w", h.save, scanErr)
	}
	return nil
}

// readSave reads iptables-save output line by line and passes on the
// lines of tables as SaveToListings turns them: chain declarations as -P
// or -N lines, rules as they are. Lines of other tables are not copied.
func readSave(r interface{ Read([]byte) (int, error) }, tables []string, each func(table string, line []byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxSaveLine)
	table, wanted := "", false
	var decl []byte // a chain declaration rewritten, reused
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) > 0 && line[0] == '*':
			table = string(line[1:])
			wanted = slices.Contains(tables, table)
		case !wanted:
		case len(line) > 0 && line[0] == ':':
			chain, policy, _ := cutField(line[1:])
			decl = append(decl[:0], "-N "...)
			if len(policy) > 0 && string(policy) != "-" {
				decl = append(decl[:0], "-P "...)
			}
			decl = append(decl, chain...)
			if decl[1] == 'P' {
				decl = append(append(decl, ' '), policy...)
			}
			each(table, decl)
		case bytes.HasPrefix(line, []byte("-A ")):
			each(table, line)
		}
	}
	return sc.Err()
}
