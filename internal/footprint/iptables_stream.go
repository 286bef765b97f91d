package footprint

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

// SaveStreamer is an optional extension of IPTables: iptables-save read
// as it is written. each is called with every line of tables, in
// `iptables -S` form (as Saver's), one at a time.
type SaveStreamer interface {
	SaveEach(tables []string, each func(table, line string)) error
}

// maxSaveLine bounds one line of iptables-save output (a rule with a
// 255-byte comment and many matches stays far below it).
const maxSaveLine = 1 << 20

// SaveEach implements SaveStreamer.
func (h *hostIPTables) SaveEach(tables []string, each func(table, line string)) error {
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
// lines of tables as saveToListings turns them: chain declarations as -P
// or -N lines, rules as they are. Lines of other tables are not copied.
func readSave(r interface{ Read([]byte) (int, error) }, tables []string, each func(table, line string)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxSaveLine)
	table, wanted := "", false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) > 0 && line[0] == '*':
			table = string(line[1:])
			wanted = slices.Contains(tables, table)
		case !wanted:
		case len(line) > 0 && line[0] == ':':
			f := strings.Fields(string(line[1:]))
			if len(f) >= 2 && f[1] != "-" {
				each(table, "-P "+f[0]+" "+f[1])
			} else if len(f) >= 1 {
				each(table, "-N "+f[0])
			}
		case bytes.HasPrefix(line, []byte("-A ")):
			each(table, string(line))
		}
	}
	return sc.Err()
}

// streamAll lists every table cleanup reads from one streamed
// iptables-save, parsing each line as it comes.
func (f *iptView) streamAll(s SaveStreamer) {
	tables := []string{"nat", "filter"}
	listings := map[string]*tableListing{}
	for _, t := range tables {
		listings[t] = newTableListing(sweptChains[t])
	}
	err := s.SaveEach(tables, func(table, line string) { listings[table].add(line) })
	if err != nil {
		f.errs.add(fmt.Errorf("%s: listing all tables: %w", f.name(), err))
		for _, t := range tables {
			listings[t] = newTableListing(nil) // nothing is deleted blind
		}
	}
	for t, l := range listings {
		f.listings[t] = l
	}
}
