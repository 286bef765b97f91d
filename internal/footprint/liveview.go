package footprint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// liveView is the host as one drift check reads it, shared by every
// attachment checked at once: each family's nat and filter tables are
// listed whole once (one iptables-save where the IPTables offers it), the
// plugins' nftables tables once, the host's devices in one dump. Files
// and the workloads' own namespaces are read per attachment: nothing
// else knows them. What could not be read is an error of every
// attachment that needs it, never a missing piece.
type liveView struct {
	ctx               context.Context
	host              Seams
	shallow           bool // Checker.Shallow
	firewallUnchanged bool // Checker.FirewallUnchanged

	mu    sync.Mutex
	ipt   [2]*liveTables
	nft   *liveNFT
	links *liveLinks
}

func newLiveView(ctx context.Context, h Seams) *liveView { return &liveView{ctx: ctx, host: h} }

// tables returns family v6's iptables, listed on first use.
func (v *liveView) tables(v6 bool) (*liveTables, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if t := v.ipt[b2i(v6)]; t != nil {
		return t, t.openErr
	}
	t := &liveTables{v6: v6, listings: map[string]*tableListing{}, indexed: map[string]*chainRules{}}
	v.ipt[b2i(v6)] = t
	if v.host.IPTables == nil {
		t.openErr = fmt.Errorf("%s: %w", familyName(v6), host.ErrIPTablesMissing)
		return t, t.openErr
	}
	ipt, err := v.host.IPTables(v6)
	if err != nil {
		t.openErr = fmt.Errorf("%s: %w: %w", familyName(v6), host.ErrIPTablesMissing, err)
		return t, t.openErr
	}
	t.ipt = iptables.BindContext(v.ctx, ipt)
	return t, nil
}

// liveTables is one family's nat and filter tables, each listed whole
// once.
type liveTables struct {
	v6       bool
	ipt      host.IPTables
	openErr  error
	mu       sync.Mutex
	saved    bool
	listings map[string]*tableListing // by table, or "table/chain" listed alone
	indexed  map[string]*chainRules   // by "table/chain", as asked for
}

// tableListing is a listing and the error that left it empty.
type tableListing struct {
	l   *iptables.Listing
	err error
}

// indexedChain returns chain's rules, indexed on first use (chainRules),
// and whether it exists.
func (t *liveTables) indexedChain(table, chain string) (*chainRules, bool, error) {
	rules, exists, err := t.chain(table, chain)
	if err != nil || !exists {
		return nil, exists, err
	}
	key := table + "/" + chain
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.indexed[key]
	if !ok {
		c = indexRules(rules)
		t.indexed[key] = c
	}
	return c, true, nil
}

// listing returns table's listing, every chain's rules kept: all tables
// of the family in one iptables-save where the IPTables can (Saver),
// else the table (TableLister), else the chains a check reads
// (liveSharedChains); whole reports whether it holds every chain.
func (t *liveTables) listing(table string) (l *iptables.Listing, whole bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, lister := t.ipt.(host.TableLister)
	if tl, ok := t.listings[table]; ok {
		return tl.l, t.saved || lister, tl.err
	}
	if saver, ok := t.ipt.(host.Saver); ok && !t.saved {
		tables, err := saver.SaveAll()
		if err == nil {
			t.saved = true
			for _, name := range checkedTables {
				t.listings[name] = &tableListing{l: iptables.ParseListing(tables[name], nil)}
			}
			return t.listings[table].l, true, nil
		}
	}
	var lines []string
	if lister {
		lines, err = t.ipt.(host.TableLister).ListTable(table)
	} else {
		lines, err = t.listChains(table)
	}
	if err != nil {
		err = fmt.Errorf("%s: listing table %s: %w", familyName(t.v6), table, err)
	}
	t.listings[table] = &tableListing{l: iptables.ParseListing(lines, nil), err: err}
	return t.listings[table].l, lister, err
}

// listChains lists, without a table listing, the chains a check reads
// (the built-in chains and the plugins' shared ones); an attachment's
// own chains are listed as they are asked for (chain).
func (t *liveTables) listChains(table string) ([]string, error) {
	var lines []string
	for _, chain := range liveSharedChains[table] {
		l, err := t.ipt.List(table, chain)
		if err != nil && !iptables.IsNotExist(err) {
			return nil, err
		}
		lines = append(lines, l...)
	}
	return lines, nil
}

// What a drift check reads of iptables, from the iptables footprints'
// checkedChains.
var (
	// checkedTables are the tables a check reads.
	checkedTables = tablesOf(iptChains(iptReader.checkedChains))
	// liveSharedChains are the chains listed one by one, by table, where
	// the IPTables cannot list a whole table: the built-in chains first,
	// then the others in the order of footprints.
	liveSharedChains = chainLists(builtinFirst(iptChains(iptReader.checkedChains)))
)

// builtinChains are iptables' built-in chains, in the order packets pass
// them, which is the order iptables-save lists them in.
var builtinChains = []string{"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"}

// builtinFirst returns chains with the built-in ones first, in
// builtinChains' order, and the others after them in theirs.
func builtinFirst(chains []tableChain) []tableChain {
	rank := func(c tableChain) int {
		if i := slices.Index(builtinChains, c.chain); i >= 0 {
			return i
		}
		return len(builtinChains)
	}
	out := slices.Clone(chains)
	slices.SortStableFunc(out, func(a, b tableChain) int { return rank(a) - rank(b) })
	return out
}

// chainLists returns chains as lists of chains by table, in their order.
func chainLists(chains []tableChain) map[string][]string {
	out := map[string][]string{}
	for _, c := range chains {
		out[c.table] = append(out[c.table], c.chain)
	}
	return out
}

// chain returns the rules of chain and whether it exists.
func (t *liveTables) chain(table, chain string) (rules []iptables.Rule, exists bool, err error) {
	l, whole, err := t.listing(table)
	if err != nil {
		return nil, false, err
	}
	if has, _ := l.Has(chain); has || whole {
		return l.Chains[chain], has, nil
	}
	key := table + "/" + chain // an attachment's own chain, listed alone
	t.mu.Lock()
	tl, done := t.listings[key]
	t.mu.Unlock()
	if !done {
		lines, err := t.ipt.List(table, chain)
		switch {
		case err != nil && iptables.IsNotExist(err):
			tl = &tableListing{}
		case err != nil:
			tl = &tableListing{err: fmt.Errorf("%s: listing %s/%s: %w", familyName(t.v6), table, chain, err)}
		default:
			tl = &tableListing{l: iptables.ParseListing(lines, nil)}
		}
		t.mu.Lock()
		t.listings[key] = tl
		t.mu.Unlock()
	}
	if tl.err != nil || tl.l == nil {
		return nil, false, tl.err
	}
	return tl.l.Chains[chain], true, nil
}

// liveNFT is the plugins' nftables tables, listed once, their rules
// grouped by chain and by chain and comment: a check of many
// attachments looks each one's rules up, not through every rule.
type liveNFT struct {
	once      sync.Once
	rules     []host.NFTRule
	byChain   map[nftChainKey][]host.NFTRule
	byComment map[nftChainKey][]host.NFTRule // comment set
	err       error
}

// nftChainKey is a chain of a table, and a comment of its rules.
type nftChainKey struct {
	table          host.NFTable
	chain, comment string
}

// nftChain returns the rules of chain in table; with comments given,
// only those carrying one of them. Call it after nftRules read the
// tables without an error.
func (v *liveView) nftChain(table host.NFTable, chain string, comments ...string) []host.NFTRule {
	v.mu.Lock()
	n := v.nft
	v.mu.Unlock()
	if n == nil {
		return nil
	}
	if len(comments) == 0 {
		return n.byChain[nftChainKey{table: table, chain: chain}]
	}
	var out []host.NFTRule
	for _, c := range comments {
		out = append(out, n.byComment[nftChainKey{table, chain, c}]...)
	}
	return out
}

// nftRules returns every rule of the plugins' tables. A host without
// nftables has none.
func (v *liveView) nftRules() ([]host.NFTRule, error) {
	v.mu.Lock()
	if v.nft == nil {
		v.nft = &liveNFT{}
	}
	n := v.nft
	v.mu.Unlock()
	n.once.Do(func() {
		if v.host.NFTables == nil {
			return
		}
		nft, err := v.host.NFTables()
		switch {
		case errors.Is(err, host.ErrNFTablesMissing):
			return
		case err != nil:
			n.err = fmt.Errorf("nftables: %w", err)
			return
		}
		if n.rules, err = nft.ListRules(v.ctx, nftTables); err != nil {
			n.err = fmt.Errorf("nftables: listing %v: %w", nftTables, err)
		}
		n.byChain, n.byComment = map[nftChainKey][]host.NFTRule{}, map[nftChainKey][]host.NFTRule{}
		for _, r := range n.rules {
			table := host.NFTable{Family: r.Family, Name: r.Table}
			n.byChain[nftChainKey{table: table, chain: r.Chain}] = append(n.byChain[nftChainKey{table: table, chain: r.Chain}], r)
			if r.Comment != "" {
				key := nftChainKey{table, r.Chain, r.Comment}
				n.byComment[key] = append(n.byComment[key], r)
			}
		}
	})
	return n.rules, n.err
}

// liveLinks is the host's devices, listed once.
type liveLinks struct {
	once      sync.Once
	byName    map[string]host.LinkInfo
	inspector host.LinkInspector
	err       error
}

// errNoLinkInspector says the Links cannot list devices (no
// LinkInspector): they are not checked.
var errNoLinkInspector = errors.New("the Links seam cannot list devices (no host.LinkInspector)")

// hostLinks returns the host namespace's devices by name and the
// inspector that listed them.
func (v *liveView) hostLinks() (map[string]host.LinkInfo, host.LinkInspector, error) {
	v.mu.Lock()
	if v.links == nil {
		v.links = &liveLinks{}
	}
	l := v.links
	v.mu.Unlock()
	l.once.Do(func() {
		if v.host.Links == nil {
			l.err = errNoLinkInspector
			return
		}
		links, err := v.host.Links()
		if err != nil {
			l.err = fmt.Errorf("links: %w", err)
			return
		}
		inspector, ok := links.(host.LinkInspector)
		if !ok {
			l.err = errNoLinkInspector
			return
		}
		all, err := inspector.ListLinks()
		if err != nil {
			l.err = fmt.Errorf("links: listing the host's devices: %w", err)
			return
		}
		l.byName = make(map[string]host.LinkInfo, len(all))
		for _, link := range all {
			l.byName[link.Name] = link
		}
		l.inspector = inspector
	})
	return l.byName, l.inspector, l.err
}

// wantRule is an iptables rule a plugin writes, as a drift check looks
// for it in a listing: the options it was written with. iptables lists a
// rule in its own words (an address gets its prefix length, a subnet its
// network address, a protocol match its -m), so a listed rule matches
// when it carries every option given, with addresses compared as
// prefixes, whatever else iptables added.
type wantRule struct {
	table, chain string
	opts         [][2]string // option and value; "!-d" for a negated -d; value "" for a flag alone
	name         string      // how a person knows it
	// args are the words the plugin writes the rule with, in its order:
	// a batched repair (PlanRules) writes them as they are. nil when
	// cninet does not know every word (inexact).
	args []string
	// head: the plugin inserts the rule first in its chain (iptables -I
	// CHAIN 1) unless it is there, rather than appending it.
	head bool
	// own: the rule's chain is the attachment's alone (its CNI-DN or
	// masquerade chain), whose rules' order matters.
	own bool
}

// atHead marks w as a rule its plugin inserts first in its chain.
func (w wantRule) atHead() wantRule { w.head = true; return w }

// inOwnChain marks w as a rule of the attachment's own chain.
func (w wantRule) inOwnChain() wantRule { w.own = true; return w }

// inexact marks w as a rule cninet looks for but does not know every
// word of (a release's variant, the user's extra conditions): only the
// plugin's own ADD writes it again.
func (w wantRule) inexact() wantRule { w.args = nil; return w }

// optionAliases are the long options iptables lists by their short
// name (a rule written with --destination-ports is listed with --dports).
var optionAliases = map[string]string{
	"--source": "-s", "--destination": "-d", "--protocol": "-p", "--jump": "-j", "--goto": "-g", "--match": "-m",
	"--in-interface": "-i", "--out-interface": "-o", "--destination-ports": "--dports", "--source-ports": "--sports",
	"--destination-port": "--dport", "--source-port": "--sport",
}

// canonical is opt as iptables lists it ("!" kept in front).
func canonical(opt string) string {
	name, neg := strings.CutPrefix(opt, "!")
	if short, ok := optionAliases[name]; ok {
		name = short
	}
	if neg {
		return "!" + name
	}
	return name
}

// rule starts a wantRule of chain in table, named name, with opts as
// pairs ("-s", "10.0.0.2", "-j", "ACCEPT"); "!" before an option negates
// it.
func rule(table, chain, name string, opts ...string) wantRule {
	w := wantRule{table: table, chain: chain, name: name, args: slices.Clone(opts)}
	for i := 0; i < len(opts); i++ {
		opt := opts[i]
		if opt == "!" && i+1 < len(opts) {
			i++
			opt = "!" + opts[i]
		}
		val := ""
		if i+1 < len(opts) && !strings.HasPrefix(opts[i+1], "-") && opts[i+1] != "!" {
			i++
			val = opts[i]
		}
		w.opts = append(w.opts, [2]string{canonical(opt), val})
	}
	return w
}

// matches reports whether a rule of w's chain with the options have
// carries every option of w.
func (w wantRule) matches(have []optionValue) bool {
	for _, o := range w.opts {
		found := false
		for _, h := range have {
			if h.opt == o[0] && sameValue(o[0], o[1], h.val) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ruleOptions splits a listed rule into its options and their values, in
// order; "!" is joined to the option it negates.
func ruleOptions(r iptables.Rule) []optionValue {
	args := r.Args()
	out := make([]optionValue, 0, len(args)/2)
	for i := 0; i < len(args); i++ {
		opt := args[i]
		if opt == "!" && i+1 < len(args) {
			i++
			opt = "!" + args[i]
		}
		if !strings.HasPrefix(opt, "-") && !strings.HasPrefix(opt, "!-") {
			continue
		}
		val := ""
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && args[i+1] != "!" {
			i++
			val = args[i]
		}
		out = append(out, optionValue{canonical(opt), val})
	}
	return out
}

// sameValue compares a wanted option value with a listed one: addresses
// as prefixes (iptables lists "10.0.0.2" as "10.0.0.2/32" and
// "10.0.0.2/24" as "10.0.0.0/24"), a comment as iptables stores it (cut
// at 255 bytes), anything else byte for byte.
func sameValue(opt, want, have string) bool {
	switch strings.TrimPrefix(opt, "!") {
	case "-s", "-d", "--source", "--destination":
		w, ok1 := asPrefix(want)
		h, ok2 := asPrefix(have)
		return ok1 && ok2 && w == h
	case "--comment":
		return iptables.StoredComment(want) == have || want == have
	}
	return want == have
}

// asPrefix reads an address or a prefix as iptables stores it: the
// network of the prefix, a bare address as a host prefix.
func asPrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), true
	}
	return netip.Prefix{}, false
}

// chainRules is one listed chain whose rules a drift check looks for:
// each rule's options parsed once, and the rules indexed by each option
// value they carry (addresses as prefixes, as sameValue compares them),
// so that a check of many attachments looks each one's rules up rather
// than parsing the whole chain for every rule it wants: a chain such as
// CNI-FORWARD holds two rules per attachment.
type chainRules struct {
	opts  [][]optionValue
	index map[optionValue][]int // the rules carrying the option with the value
}

// optionValue is an option and one value of it, as indexed.
type optionValue struct{ opt, val string }

func indexRules(rules []iptables.Rule) *chainRules {
	c := &chainRules{opts: make([][]optionValue, len(rules)), index: map[optionValue][]int{}}
	for i, r := range rules {
		c.opts[i] = ruleOptions(r)
		for _, o := range c.opts[i] {
			if key, ok := indexKey(o.opt, o.val); ok {
				c.index[key] = append(c.index[key], i)
			}
		}
	}
	return c
}

// indexKey is how an option's value is indexed: an address as the
// prefix it stands for; a comment not at all (sameValue allows two
// spellings of it).
func indexKey(opt, val string) (optionValue, bool) {
	switch strings.TrimPrefix(opt, "!") {
	case "--comment":
		return optionValue{}, false
	case "-s", "-d":
		p, ok := asPrefix(val)
		if !ok {
			return optionValue{}, false
		}
		val = p.String()
	}
	return optionValue{opt, val}, true
}

// has reports whether one of the chain's rules is w: among the rules
// carrying the rarest of w's indexed option values (a rule that is w
// carries them all), one carrying every option of w.
func (c *chainRules) has(w wantRule) bool {
	var candidates []int
	indexed := false
	for _, o := range w.opts {
		key, ok := indexKey(o[0], o[1])
		if !ok {
			continue
		}
		with := c.index[key]
		if len(with) == 0 {
			return false
		}
		if !indexed || len(with) < len(candidates) {
			candidates, indexed = with, true
		}
	}
	if !indexed {
		for i := range c.opts {
			if w.matches(c.opts[i]) {
				return true
			}
		}
		return false
	}
	for _, i := range candidates {
		if w.matches(c.opts[i]) {
			return true
		}
	}
	return false
}

// expectRules adds to h each of want that family v6's listing lacks, as a
// piece of plugin's footprint restored by restore; a chain that is not
// there is reported once, with every rule it should hold.
func expectRules(v *liveView, v6 bool, plugin string, restore Restore, h *Health, want ...wantRule) {
	if v.firewallUnchanged {
		return
	}
	t, err := v.tables(v6)
	if err != nil {
		h.unknown(err)
		return
	}
	for _, w := range want {
		rules, exists, err := t.indexedChain(w.table, w.chain)
		if err != nil {
			h.unknown(err)
			continue
		}
		if !exists || !rules.has(w) {
			h.missWritable(Missing{Plugin: plugin, Kind: KindRule, Backend: familyName(v6), Detail: w.table + " " + w.chain + ": " + w.name, Restore: restore},
				ruleWrite{v6: v6, table: w.table, chain: w.chain, rule: &w})
		}
	}
}

// expectChains adds to h each of chains of table that family v6 lacks.
func expectChains(v *liveView, v6 bool, plugin string, restore Restore, h *Health, table string, chains ...string) {
	if v.firewallUnchanged {
		return
	}
	t, err := v.tables(v6)
	if err != nil {
		h.unknown(err)
		return
	}
	for _, ch := range chains {
		_, exists, err := t.chain(table, ch)
		if err != nil {
			h.unknown(err)
			continue
		}
		if !exists {
			h.missWritable(Missing{Plugin: plugin, Kind: KindChain, Backend: familyName(v6), Detail: table + " " + ch, Restore: restore},
				ruleWrite{v6: v6, table: table, chain: ch})
		}
	}
}
