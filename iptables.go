package cninet

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"

	"github.com/coreos/go-iptables/iptables"
)

// TableLister is an optional extension of IPTables: list a whole table in
// one command (`iptables -t table -S`). Cleanup and GC use it when the
// IPTables implements it, starting one process per table instead of one
// per chain.
type TableLister interface {
	ListTable(table string) ([]string, error)
}

// Saver is an optional extension of IPTables: list every table in one
// command (iptables-save), each table's lines in `iptables -S` form. Cleanup
// prefers it to TableLister: one process per family instead of one per
// table.
type Saver interface {
	SaveAll() (map[string][]string, error)
}

// Restorer is an optional extension of IPTables: apply many changes to one
// table in one `iptables-restore --noflush` transaction. GC uses it to
// delete a sweep's rules and chains in one process per table and family,
// falling back to one Delete per rule when the batch is refused.
type Restorer interface {
	RestoreNoFlush(table string, lines []string) error
}

// hostIPTables is the default IPTables: go-iptables plus the two
// extensions, run against the same binaries.
type hostIPTables struct {
	*iptables.IPTables
	list, save, restore string // binaries
}

// newIPTables is the default Config.IPTables.
func newIPTables(ipv6 bool) (IPTables, error) {
	proto, list, save, restore := iptables.ProtocolIPv4, "iptables", "iptables-save", "iptables-restore"
	if ipv6 {
		proto, list, save, restore = iptables.ProtocolIPv6, "ip6tables", "ip6tables-save", "ip6tables-restore"
	}
	ipt, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return nil, err
	}
	h := &hostIPTables{IPTables: ipt}
	if h.list, err = exec.LookPath(list); err != nil {
		return nil, err
	}
	h.save, _ = exec.LookPath(save)       // optional: without it tables are listed one by one
	h.restore, _ = exec.LookPath(restore) // optional: without it deletions go rule by rule
	return h, nil
}

// SaveAll implements Saver.
func (h *hostIPTables) SaveAll() (map[string][]string, error) {
	if h.save == "" {
		return nil, errors.New("iptables-save not found")
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command(h.save)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", h.save, err, strings.TrimSpace(stderr.String()))
	}
	return saveToListings(out.String()), nil
}

// saveToListings turns iptables-save output into `iptables -S` lines per
// table: ":CHAIN POLICY [n:m]" becomes "-P CHAIN POLICY" for built-in
// chains and "-N CHAIN" for the others ("-" policy); rules stay as they are.
func saveToListings(save string) map[string][]string {
	tables := map[string][]string{}
	table := ""
	for _, line := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimPrefix(line, "*")
			tables[table] = nil
		case strings.HasPrefix(line, ":") && table != "":
			f := strings.Fields(strings.TrimPrefix(line, ":"))
			if len(f) >= 2 && f[1] != "-" {
				tables[table] = append(tables[table], "-P "+f[0]+" "+f[1])
			} else if len(f) >= 1 {
				tables[table] = append(tables[table], "-N "+f[0])
			}
		case strings.HasPrefix(line, "-A ") && table != "":
			tables[table] = append(tables[table], line)
		}
	}
	return tables
}

// ListTable implements TableLister.
func (h *hostIPTables) ListTable(table string) ([]string, error) {
	var out, stderr bytes.Buffer
	cmd := exec.Command(h.list, "-w", "-t", table, "-S")
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s -t %s -S: %w: %s", h.list, table, err, strings.TrimSpace(stderr.String()))
	}
	return strings.Split(strings.TrimRight(out.String(), "\n"), "\n"), nil
}

// RestoreNoFlush implements Restorer.
func (h *hostIPTables) RestoreNoFlush(table string, lines []string) error {
	if h.restore == "" {
		return errors.New("iptables-restore not found")
	}
	var in bytes.Buffer
	fmt.Fprintf(&in, "*%s\n%s\nCOMMIT\n", table, strings.Join(lines, "\n"))
	var stderr bytes.Buffer
	cmd := exec.Command(h.restore, "-w", "--noflush")
	cmd.Stdin, cmd.Stderr = &in, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s --noflush (%s): %w: %s", h.restore, table, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// tableCache opens iptables and ip6tables once each; a failed open (say,
// ip6tables missing) is retried on the next use.
type tableCache struct {
	open   func(ipv6 bool) (IPTables, error)
	mu     sync.Mutex
	tables [2]IPTables
}

func (t *tableCache) get(ipv6 bool) (IPTables, error) {
	i := 0
	if ipv6 {
		i = 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tables[i] != nil {
		return t.tables[i], nil
	}
	ipt, err := t.open(ipv6)
	if err != nil {
		return nil, err
	}
	t.tables[i] = ipt
	return ipt, nil
}
