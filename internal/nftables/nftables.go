package nftables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

// hostNFTables is the default NFTables: netlink for the list of tables,
// their rules (the addresses cleanup judges by decoded in-process,
// nfnetlink.Rule.Addrs), in-process scans and deletions by handle
// (handles.go). `nft -j` lists a table only where netlink cannot: nft
// reads every rule of the host to list one table, so its cost grows with
// the host's ruleset (kube-proxy's, iptables-nft's) rather than with the
// plugins' tables.
type hostNFTables struct {
	bin string

	copyOnce sync.Once
	copy     *nfnetlink.Mirror // nil: it could not be opened; the kernel is asked
}

// rulesCopy returns the copy of the plugins' rules kept by nf_tables'
// notifications (nfnetlink.Mirror), opened at the first question in the
// asking thread's network namespace, and closed when h is collected;
// nil when it cannot be opened.
func (h *hostNFTables) rulesCopy() *nfnetlink.Mirror {
	h.copyOnce.Do(func() {
		m, err := nfnetlink.OpenMirror()
		if err != nil {
			return
		}
		h.copy = m
		runtime.AddCleanup(h, func(m *nfnetlink.Mirror) { m.Close() }, m)
	})
	return h.copy
}

// Close releases the copy of the rules, if one was opened: its
// subscription to nf_tables' notifications (while it lasts, the kernel
// builds a message for this process of every change any process makes,
// and its goroutine reads each) and its socket. Questions asked after it
// go to the kernel. It always returns nil.
func (h *hostNFTables) Close() error {
	h.copyOnce.Do(func() {}) // none is opened after it
	if h.copy != nil {
		h.copy.Close()
	}
	return nil
}

// New opens the host's nftables; ErrNFTablesMissing when nft
// is not installed.
func New() (host.NFTables, error) {
	bin, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", host.ErrNFTablesMissing, err)
	}
	return &hostNFTables{bin: bin}, nil
}

// NewWithoutCopy is New whose questions all go to the kernel: it keeps
// no copy of the rules (rulesCopy), and so joins no notifications.
func NewWithoutCopy() (host.NFTables, error) {
	nft, err := New()
	if err != nil {
		return nil, err
	}
	h := nft.(*hostNFTables)
	h.copyOnce.Do(func() {})
	return h, nil
}

// ListRules implements NFTables: the tables that exist from netlink (`nft
// list tables` reads every rule of the host to print their names), then
// each one's rules over netlink, without Expr (cleanup never reads it).
func (h *hostNFTables) ListRules(ctx context.Context, tables []host.NFTable) ([]host.NFTRule, error) {
	return h.listRules(ctx, tables)
}

// ListRulesBrief implements NFTBriefLister: ListRules, which keeps no
// Expr either.
func (h *hostNFTables) ListRulesBrief(ctx context.Context, tables []host.NFTable) ([]host.NFTRule, error) {
	return h.listRules(ctx, tables)
}

func (h *hostNFTables) listRules(ctx context.Context, tables []host.NFTable) ([]host.NFTRule, error) {
	existing, err := nfnetlink.ListTables()
	if err != nil {
		return nil, err
	}
	var rules ruleChunks
	comments := map[string]string{}
	for _, t := range tables {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !existing[t] {
			continue
		}
		start := rules.n
		err := listTableNetlink(t, &rules, comments)
		if err != nil {
			rules.truncate(start)
			var listed []host.NFTRule
			if listed, err = h.listTable(ctx, t, false, nil, comments); err == nil {
				for _, r := range listed {
					rules.add(r)
				}
			}
		}
		if err != nil {
			if strings.Contains(err.Error(), "No such file or directory") {
				continue // deleted since: nothing to list
			}
			return nil, err
		}
	}
	return rules.all(), nil
}

// listTableNetlink lists one table over netlink, adding its rules to
// rules with the addresses, ports and verdicts nft would list for them.
func listTableNetlink(t host.NFTable, rules *ruleChunks, comments map[string]string) error {
	start := rules.n
	return nfnetlink.EachRule(t.Family, t.Name, func() { rules.truncate(start) }, func(r nfnetlink.Rule) error {
		d, err := r.Decode() // while the dump's bytes are there: none is copied
		if err != nil {
			return err
		}
		comment, ok := comments[r.Comment]
		if !ok {
			comment, comments[r.Comment] = r.Comment, r.Comment
		}
		rules.add(host.NFTRule{Family: nftName(t.Family), Table: nftName(t.Name), Chain: nftName(r.Chain),
			Handle: int(r.Handle), Comment: comment, Saddr: d.Saddr, Daddr: d.Daddr, DNAT: d.DNAT,
			DPort: d.DPort, DNATPort: d.DNATPort, L4Proto: d.L4Proto, Verdict: d.Verdict, Target: nftName(d.Target)})
		return nil
	})
}

// AnyRule implements NFTRuleMatcher over netlink: no process, no JSON,
// one dump per table, the tables at once (the kernel's dump of a big
// table is the whole cost).
func (h *hostNFTables) AnyRule(ctx context.Context, tables []host.NFTable, match func(host.NFTRuleSketch) bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if m := h.rulesCopy(); m != nil {
		asked := make([]nfnetlink.Chain, len(tables))
		for i, t := range tables {
			asked[i] = nfnetlink.Chain{Family: t.Family, Table: t.Name}
		}
		found, err := m.Any(asked, func(r nfnetlink.Rule) bool {
			return match(host.NFTRuleSketch{Table: host.NFTable{Family: r.Family, Name: r.Table}, Chain: r.Chain,
				Handle: int(r.Handle), Comment: r.Comment, Raw: r.Expr})
		})
		if err == nil {
			return found, nil
		}
	}
	found := make([]bool, len(tables))
	errs := make([]error, len(tables))
	var wg sync.WaitGroup
	var one sync.Mutex // match sees one rule at a time
	for i, t := range tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = nfnetlink.AnyRule(t.Family, t.Name, "", func(r nfnetlink.Rule) bool {
				one.Lock()
				defer one.Unlock()
				return match(host.NFTRuleSketch{Table: t, Chain: r.Chain, Handle: int(r.Handle), Comment: r.Comment, Raw: r.Expr})
			})
		}()
	}
	wg.Wait()
	return slices.Contains(found, true), errors.Join(errs...)
}

// FindRules implements NFTRuleFinder from the copy of the rules that
// nf_tables' notifications keep (rulesCopy), which reads the kernel only
// when it must; where the copy cannot answer, over netlink: one dump of
// each chain, the tables at once over a socket each, the chains of one
// table in turn.
func (h *hostNFTables) FindRules(ctx context.Context, chains []host.NFTChain, comments []string) ([]host.NFTRuleSketch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	want := make(map[string]bool, len(comments))
	for _, c := range comments {
		want[c] = true
	}
	if m := h.rulesCopy(); m != nil {
		asked := make([]nfnetlink.Chain, len(chains))
		for i, c := range chains {
			asked[i] = nfnetlink.Chain{Family: c.Table.Family, Table: c.Table.Name, Name: c.Name}
		}
		if found, err := m.Find(asked, want); err == nil {
			out := make([]host.NFTRuleSketch, len(found))
			for i, r := range found {
				out[i] = host.NFTRuleSketch{Table: host.NFTable{Family: r.Family, Name: r.Table}, Chain: nftName(r.Chain),
					Handle: int(r.Handle), Comment: r.Comment, Raw: r.Expr}
			}
			return out, nil
		}
	}
	var tables []host.NFTable
	byTable := map[host.NFTable][]string{}
	for _, c := range chains {
		if _, ok := byTable[c.Table]; !ok {
			tables = append(tables, c.Table)
		}
		byTable[c.Table] = append(byTable[c.Table], c.Name)
	}
	found := make([][]nfnetlink.Rule, len(tables))
	errs := make([]error, len(tables))
	var wg sync.WaitGroup
	for i, t := range tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = nfnetlink.FindRules(t.Family, t.Name, byTable[t], want)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []host.NFTRuleSketch
	for i, t := range tables {
		for _, r := range found[i] {
			out = append(out, host.NFTRuleSketch{Table: t, Chain: nftName(r.Chain), Handle: int(r.Handle), Comment: r.Comment, Raw: r.Expr})
		}
	}
	return out, nil
}

// LookupRule implements NFTRuleLookup over netlink: the kernel finds the
// rule by handle in its chain and sends it alone.
func (h *hostNFTables) LookupRule(ctx context.Context, t host.NFTable, chain string, handle int) (host.NFTRuleSketch, bool, error) {
	if err := ctx.Err(); err != nil {
		return host.NFTRuleSketch{}, false, err
	}
	if handle <= 0 {
		return host.NFTRuleSketch{}, false, fmt.Errorf("nftables: looking up rule %d of %s %s: %w", handle, t, chain, errBadHandle)
	}
	r, found, err := nfnetlink.LookupRule(t.Family, t.Name, chain, uint64(handle))
	if err != nil || !found {
		return host.NFTRuleSketch{}, false, err
	}
	return host.NFTRuleSketch{Table: t, Chain: r.Chain, Handle: int(r.Handle), Comment: r.Comment, Raw: r.Expr}, true, nil
}

// errBadHandle says a handle is not one nf_tables gives (they start at 1).
var errBadHandle = errors.New("not a rule handle: nf_tables numbers rules from 1")

// listTable lists one table with `nft -j`, parsing the JSON as nft
// writes it, and appends its rules to rules.
func (h *hostNFTables) listTable(ctx context.Context, t host.NFTable, keepExpr bool, rules []host.NFTRule, comments map[string]string) ([]host.NFTRule, error) {
	args := []string{"-j", "list", "table", t.Family, t.Name}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nft %s: %w", strings.Join(args, " "), err)
	}
	rules, parseErr := readNFTListing(out, keepExpr, rules, comments)
	_, _ = io.Copy(io.Discard, out) // what a failed parse left: nft must finish writing
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if parseErr != nil {
		return nil, fmt.Errorf("%s: %w", t, parseErr)
	}
	return rules, nil
}

// Opener opens nftables once for every cleaner of one
// Configurator. A host without nft is asked again next time (nft may have
// been installed since); the zero value opens the host's.
type Opener struct {
	Open func() (host.NFTables, error)
	mu   sync.Mutex
	nft  host.NFTables
}

// Close closes the NFTables Get opened, when the Opener opened the
// default (Open nil) and it holds something to release (its copy of the
// rules); one that Open returned is its caller's to close. The
// Configurator closes its Opener when it is closed.
func (h *Opener) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.nft.(io.Closer); ok && h.Open == nil {
		return c.Close()
	}
	return nil
}

// Get returns the NFTables.
func (h *Opener) Get() (host.NFTables, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nft != nil {
		return h.nft, nil
	}
	open := h.Open
	if open == nil {
		open = New
	}
	nft, err := open()
	if err != nil {
		return nil, err
	}
	h.nft = nft
	return nft, nil
}
