package footprint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
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
	ctx     context.Context
	host    Seams
	shallow bool // Checker.Shallow

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
	t := &liveTables{v6: v6, listings: map[string]*tableListing{}}
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
}

// tableListing is a listing and the error that left it empty.
type tableListing struct {
	l   *iptables.Listing
	err error
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
			for _, name := range []string{"nat", "filter"} {
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

// liveSharedChains are the chains listed one by one where the IPTables
// cannot list a whole table.
var liveSharedChains = map[string][]string{
	"nat":    {"PREROUTING", "OUTPUT", postrouting, hostportDNATChain, hostportSetMarkChain, hostportMasqChain},
	"filter": {"FORWARD", firewallChain},
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

// liveNFT is the plugins' nftables tables, listed once.
type liveNFT struct {
	once  sync.Once
	rules []host.NFTRule
	err   error
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
}

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
	w := wantRule{table: table, chain: chain, name: name}
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

// in reports whether one of rules is w.
func (w wantRule) in(rules []iptables.Rule) bool {
	for _, r := range rules {
		if w.matches(r) {
			return true
		}
	}
	return false
}

// matches reports whether r carries every option of w.
func (w wantRule) matches(r iptables.Rule) bool {
	if r.Chain != w.chain {
		return false
	}
	have := ruleOptions(r)
	for _, o := range w.opts {
		found := false
		for _, h := range have[o[0]] {
			if sameValue(o[0], o[1], h) {
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

// ruleOptions splits a listed rule into its options and their values;
// "!" is joined to the option it negates.
func ruleOptions(r iptables.Rule) map[string][]string {
	args := r.Args()
	out := map[string][]string{}
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
		out[canonical(opt)] = append(out[canonical(opt)], val)
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

// expectRules adds to h each of want that family v6's listing lacks, as a
// piece of plugin's footprint restored by restore; a chain that is not
// there is reported once, with every rule it should hold.
func expectRules(v *liveView, v6 bool, plugin string, restore Restore, h *Health, want ...wantRule) {
	t, err := v.tables(v6)
	if err != nil {
		h.unknown(err)
		return
	}
	for _, w := range want {
		rules, exists, err := t.chain(w.table, w.chain)
		if err != nil {
			h.unknown(err)
			continue
		}
		if !exists || !w.in(rules) {
			h.miss(Missing{Plugin: plugin, Kind: KindRule, Backend: familyName(v6), Detail: w.table + " " + w.chain + ": " + w.name, Restore: restore})
		}
	}
}

// expectChains adds to h each of chains of table that family v6 lacks.
func expectChains(v *liveView, v6 bool, plugin string, restore Restore, h *Health, table string, chains ...string) {
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
			h.miss(Missing{Plugin: plugin, Kind: KindChain, Backend: familyName(v6), Detail: table + " " + ch, Restore: restore})
		}
	}
}
