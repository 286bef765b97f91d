package footprint

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/coreos/go-iptables/iptables"
)

// IPTables is the subset of *iptables.IPTables (github.com/coreos/go-iptables)
// that cleanup uses; *iptables.IPTables satisfies it unchanged. An
// implementation may also offer TableLister, Saver and Restorer to save
// processes on whole-host sweeps.
type IPTables interface {
	// List returns the rules of one chain as `iptables -t table -S chain`
	// prints them, the chain's own -N or -P line first. A chain that does
	// not exist is an error.
	List(table, chain string) ([]string, error)
	// Delete deletes one rule by its specification.
	Delete(table, chain string, rulespec ...string) error
	// ClearAndDeleteChain flushes and deletes a chain; a chain that does not
	// exist is not an error.
	ClearAndDeleteChain(table, chain string) error
}

// TableLister is an optional extension of IPTables: list a whole table in
// one command (`iptables -t table -S`).
type TableLister interface {
	ListTable(table string) ([]string, error)
}

// Saver is an optional extension of IPTables: list every table in one
// command (iptables-save), each table's lines in `iptables -S` form.
type Saver interface {
	SaveAll() (map[string][]string, error)
}

// Restorer is an optional extension of IPTables: apply many changes to one
// table in one `iptables-restore --noflush` transaction.
type Restorer interface {
	RestoreNoFlush(table string, lines []string) error
}

// ChainProber is an optional extension of IPTables: whether a chain
// exists, at a cost that does not grow with the table. A Teardown asks it
// instead of listing the chains an attachment can own; an error makes it
// list them after all.
type ChainProber interface {
	ProbeChain(table, chain string) (bool, error)
}

// AddrScanner is an optional extension of IPTables: whether any rule of a
// chain may be about one of addrs, read without listing the chain. false
// must prove that no rule of the chain matches or rewrites any of them;
// true only sends the caller to the real listing. An error does too.
type AddrScanner interface {
	MayMention(table, chain string, addrs []netip.Addr) (bool, error)
}

// isNotExist reports whether err says a chain or rule does not exist, for
// go-iptables errors and for fakes that mimic iptables' messages.
//
// iptables 1.8.9 with the nf_tables backend (Debian 12's) answers `-S` of
// a chain that does not exist with "chain `X' in table `T' is
// incompatible, use 'nft' tool" instead. The chains cleanup lists were
// written by iptables itself (the plugins', and the built-in ones), so for
// them that answer means absent; and reading it so can only make cleanup
// delete less, never more.
func isNotExist(err error) bool {
	var ne interface{ IsNotExist() bool }
	if errors.As(err, &ne) && ne.IsNotExist() {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "No chain/target/match by that name") ||
		strings.Contains(msg, "does not exist") || strings.Contains(msg, "Bad rule") ||
		(strings.Contains(msg, "in table `") && strings.Contains(msg, "is incompatible, use 'nft' tool"))
}

// hostIPTables is the default IPTables: go-iptables plus the extensions,
// run against the same binaries.
type hostIPTables struct {
	*iptables.IPTables
	list, save, restore string // binaries
}

// NewHostIPTables opens the host's iptables (ipv6 false) or ip6tables.
func NewHostIPTables(ipv6 bool) (IPTables, error) {
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
	if nf, err := onNFTables(h, ipv6); err == nil {
		return nf, nil
	}
	return h, nil
}

// onNFTables returns h's iptables with netlink probes when the binary
// is iptables-nft, else an error.
func onNFTables(h *hostIPTables, ipv6 bool) (*nfIPTables, error) {
	resolved, err := filepath.EvalSymlinks(h.list)
	if err != nil {
		return nil, err
	}
	version, err := run(h.list, nil, "--version") // by its name: a multi-call binary needs it
	if err != nil {
		return nil, err
	}
	if !strings.Contains(version, "(nf_tables)") {
		return nil, fmt.Errorf("%s is %s", h.list, strings.TrimSpace(version))
	}
	family := "ip"
	if ipv6 {
		family = "ip6"
	}
	return &nfIPTables{hostIPTables: h, family: family, resolved: resolved}, nil
}

// nfIPTables is the host's iptables on the nf_tables backend (iptables-nft):
// its tables are nf_tables tables, which netlink reads directly, so chains
// are looked up and rules scanned without starting a process. The plugins
// run the same iptables binary, so their rules are where this looks.
type nfIPTables struct {
	*hostIPTables
	family   string // "ip" or "ip6"
	resolved string // the binary found on the nf_tables backend
}

// errBackendSwitched says iptables no longer resolves to the binary that
// was found on the nf_tables backend (an operator switched alternatives),
// so its tables may not be nf_tables' any more.
var errBackendSwitched = errors.New("iptables was switched to another binary since it was opened")

// sameBinary checks that iptables still resolves to the nf_tables binary.
func (h *nfIPTables) sameBinary() error {
	if resolved, err := filepath.EvalSymlinks(h.list); err != nil || resolved != h.resolved {
		return fmt.Errorf("%s: %w", h.list, errBackendSwitched)
	}
	return nil
}

// ProbeChain implements ChainProber.
func (h *nfIPTables) ProbeChain(table, chain string) (bool, error) {
	if err := h.sameBinary(); err != nil {
		return false, err
	}
	return nfProbeChain(h.family, table, chain)
}

// MayMention implements AddrScanner: an address a rule matches on or
// rewrites to is in that rule's expressions, byte for byte.
func (h *nfIPTables) MayMention(table, chain string, addrs []netip.Addr) (bool, error) {
	if err := h.sameBinary(); err != nil {
		return true, err
	}
	raw := addrBytes(addrs)
	found, err := nfAnyRule(h.family, table, chain, func(r nlRule) bool { return r.mentions(raw) })
	return found || err != nil, err
}

// addrBytes returns each address as it appears in a rule: 4 or 16 bytes in
// network order.
func addrBytes(addrs []netip.Addr) [][]byte {
	raw := make([][]byte, len(addrs))
	for i, a := range addrs {
		raw[i] = a.Unmap().AsSlice()
	}
	return raw
}

// SaveAll implements Saver.
func (h *hostIPTables) SaveAll() (map[string][]string, error) {
	if h.save == "" {
		return nil, errors.New("iptables-save not found")
	}
	out, err := run(h.save, nil)
	if err != nil {
		return nil, err
	}
	return saveToListings(out), nil
}

// ListTable implements TableLister.
func (h *hostIPTables) ListTable(table string) ([]string, error) {
	out, err := run(h.list, nil, "-w", "-t", table, "-S")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(out, "\n"), "\n"), nil
}

// RestoreNoFlush implements Restorer.
func (h *hostIPTables) RestoreNoFlush(table string, lines []string) error {
	if h.restore == "" {
		return errors.New("iptables-restore not found")
	}
	in := fmt.Sprintf("*%s\n%s\nCOMMIT\n", table, strings.Join(lines, "\n"))
	_, err := run(h.restore, strings.NewReader(in), "-w", "--noflush")
	return err
}

// run runs a command and returns its output; a failure carries stderr.
func run(bin string, stdin *strings.Reader, args ...string) (string, error) {
	var out, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

// Tables opens iptables and ip6tables once each, for every cleaner of one
// Configurator; a failed open (say, ip6tables missing) is retried on the
// next use. The zero value opens the host's with NewHostIPTables.
type Tables struct {
	Open   func(ipv6 bool) (IPTables, error)
	mu     sync.Mutex
	tables [2]IPTables
}

// Get returns the family's IPTables.
func (t *Tables) Get(ipv6 bool) (IPTables, error) {
	i := 0
	if ipv6 {
		i = 1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tables[i] != nil {
		return t.tables[i], nil
	}
	open := t.Open
	if open == nil {
		open = NewHostIPTables
	}
	ipt, err := open(ipv6)
	if err != nil {
		return nil, err
	}
	t.tables[i] = ipt
	return ipt, nil
}
