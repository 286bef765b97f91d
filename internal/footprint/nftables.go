package footprint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
)

// NFTable names one nftables table.
type NFTable struct {
	Family, Name string
}

func (t NFTable) String() string { return t.Family + " " + t.Name }

// NFTables is how the cleaner reads and changes the tables the plugins'
// nftables backends write. Tests replace it with a fake.
type NFTables interface {
	// ListRules returns the rules of those of tables that exist; a table
	// that does not exist is no error.
	ListRules(ctx context.Context, tables []NFTable) ([]NFTRule, error)
	// DeleteRules deletes rules of one table by chain and handle, in one
	// transaction: all of them, or none and an error.
	DeleteRules(ctx context.Context, table NFTable, rules []NFTRule) error
}

// NFTRuleSketch is a rule as nf_tables itself reports it, without nft:
// where it is, its comment, and its expressions undecoded.
type NFTRuleSketch struct {
	Table   NFTable
	Chain   string
	Comment string
	// Raw is the rule's expressions as nf_tables encodes them; every
	// address the rule matches on or rewrites to is in it, byte for byte.
	// It is valid only during the call that is given the sketch.
	Raw []byte
}

// Mentions reports whether any of addrs is in the rule's expressions.
// false proves the rule is about none of them; true may be a coincidence.
func (s NFTRuleSketch) Mentions(addrs []netip.Addr) bool {
	return nlRule{rawExpression: s.Raw}.mentions(addrBytes(addrs))
}

// NFTRuleMatcher is an optional extension of NFTables: whether match holds
// for a rule of those of tables that exist, read in-process and stopping
// at the first. match is called for one rule at a time. A Teardown asks it whether anything there can be its own
// before it lists the tables with nft; an error makes it list them.
type NFTRuleMatcher interface {
	AnyRule(ctx context.Context, tables []NFTable, match func(NFTRuleSketch) bool) (bool, error)
}

// NFTBriefLister is an optional extension of NFTables: ListRules without
// the rules' Expr, which is most of their size and needed only to add a
// rule back. A sweep of dead workloads never adds one of theirs back.
type NFTBriefLister interface {
	ListRulesBrief(ctx context.Context, tables []NFTable) ([]NFTRule, error)
}

// ErrNFTablesMissing says the host has no nft command. A host without
// nftables has no nftables rules either, so the cleaner does not count it
// as a failure.
var ErrNFTablesMissing = errors.New("nft not available")

// hostNFTables is the default NFTables: `nft -j` for listings (ownership
// of portmap's rules needs their addresses), netlink for the list of
// tables and for deletions (nftables_handles.go), `nft -j -f -` to add
// rules back.
type hostNFTables struct {
	bin string
}

// NewHostNFTables opens the host's nftables; ErrNFTablesMissing when nft
// is not installed.
func NewHostNFTables() (NFTables, error) {
	bin, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNFTablesMissing, err)
	}
	return &hostNFTables{bin: bin}, nil
}

// ListRules implements NFTables: the tables that exist from netlink (`nft
// list tables` reads every rule of the host to print their names), then
// one `nft -j` listing per table that exists (none on a host whose plugins never used
// their nftables backends).
func (h *hostNFTables) ListRules(ctx context.Context, tables []NFTable) ([]NFTRule, error) {
	return h.listRules(ctx, tables, true)
}

// ListRulesBrief implements NFTBriefLister.
func (h *hostNFTables) ListRulesBrief(ctx context.Context, tables []NFTable) ([]NFTRule, error) {
	return h.listRules(ctx, tables, false)
}

func (h *hostNFTables) listRules(ctx context.Context, tables []NFTable, keepExpr bool) ([]NFTRule, error) {
	existing, err := nfListTables()
	if err != nil {
		return nil, err
	}
	var rules []NFTRule
	comments := map[string]string{}
	for _, t := range tables {
		if !existing[t] {
			continue
		}
		more, err := h.listTable(ctx, t, keepExpr, rules, comments)
		if err != nil {
			if strings.Contains(err.Error(), "No such file or directory") {
				continue // deleted since: nothing to list
			}
			return nil, err
		}
		rules = more
	}
	return rules, nil
}

// AnyRule implements NFTRuleMatcher over netlink: no process, no JSON,
// one dump per table, the tables at once (the kernel's dump of a big
// table is the whole cost).
func (h *hostNFTables) AnyRule(ctx context.Context, tables []NFTable, match func(NFTRuleSketch) bool) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	found := make([]bool, len(tables))
	errs := make([]error, len(tables))
	var wg sync.WaitGroup
	var one sync.Mutex // match sees one rule at a time
	for i, t := range tables {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = nfAnyRule(t.Family, t.Name, "", func(r nlRule) bool {
				one.Lock()
				defer one.Unlock()
				return match(NFTRuleSketch{Table: t, Chain: r.chain, Comment: r.comment, Raw: r.rawExpression})
			})
		}()
	}
	wg.Wait()
	return slices.Contains(found, true), errors.Join(errs...)
}

// listTable lists one table with `nft -j`, parsing the JSON as nft
// writes it, and appends its rules to rules.
func (h *hostNFTables) listTable(ctx context.Context, t NFTable, keepExpr bool, rules []NFTRule, comments map[string]string) ([]NFTRule, error) {
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

// NFTablesHandle opens nftables once for every cleaner of one
// Configurator. A host without nft is asked again next time (nft may have
// been installed since); the zero value opens the host's.
type NFTablesHandle struct {
	Open func() (NFTables, error)
	mu   sync.Mutex
	nft  NFTables
}

// Get returns the NFTables.
func (h *NFTablesHandle) Get() (NFTables, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nft != nil {
		return h.nft, nil
	}
	open := h.Open
	if open == nil {
		open = NewHostNFTables
	}
	nft, err := open()
	if err != nil {
		return nil, err
	}
	h.nft = nft
	return nft, nil
}
