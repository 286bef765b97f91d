package footprint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
	"sigs.k8s.io/knftables"
)

// A repair restores a live attachment's missing pieces in place, and only
// its own: the plugins' own ADD writes what it wrote (portmap, firewall:
// both add a rule only where it is missing), and what no plugin can write
// again alone cninet writes exactly as the plugin or its library does —
// the bridge's masquerade rules (pkg/ip's SetupIPMasqForNetworks, same
// commands, same words), host-local's reservation, libcni's cached
// result. Nothing of another attachment is deleted or changed: the shared
// chains a plugin's ADD touches it only adds to (or, on nftables,
// replaces with the same rules in one transaction).

// ErrNotInPlace says a repair was not tried: something missing cannot be
// restored while the workload lives (Restore NotInPlace).
var ErrNotInPlace = errors.New("cannot be restored in place")

// Restorers are what a repair runs outside this package.
type Restorers struct {
	// PluginADD runs the ADD of the network's plugin of type typ alone,
	// for the attachment, with its cached result as prevResult.
	PluginADD func(typ string) error
	// WriteCache writes libcni's cached result of the attachment again.
	WriteCache func() error
	// ReservationMode is the mode host-local gives its reservation files
	// (0644 before its 1.2 releases, 0600 since).
	ReservationMode os.FileMode
}

// Repair restores what h found missing, in this order: libcni's cached
// result and host-local's reservations (the plugins' DEL and CHECK read
// them), the masquerade rules, then each plugin's own ADD in the
// conflist's order. Before portmap's ADD on nftables, which adds its
// rules without looking for them, what is left of the attachment's own
// hostport rules is deleted. It returns what it restored; a step that
// fails does not stop the others. With anything NotInPlace it does
// nothing and returns an ErrNotInPlace error naming it.
func (c *Checker) Repair(h Health, r Restorers) (restored []Missing, err error) {
	if !h.InPlace() {
		var lost []Missing
		for _, m := range h.Missing {
			if m.Restore == NotInPlace {
				lost = append(lost, m)
			}
		}
		return nil, fmt.Errorf("%w: %s", ErrNotInPlace, joinDetails(lost))
	}
	a := h.Live
	var errs []error
	done := func(plugin string, restore Restore, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, m := range h.Missing {
			if m.Plugin == plugin && m.Restore == restore {
				restored = append(restored, m)
			}
		}
	}
	if slices.ContainsFunc(h.Missing, func(m Missing) bool { return m.Plugin == "libcni" }) {
		done("libcni", ByCninet, wrapRestore("libcni's cached result", r.WriteCache()))
	}
	if slices.ContainsFunc(h.Missing, func(m Missing) bool { return m.Plugin == "host-local" }) {
		done("host-local", ByCninet, c.reserve(a, r.ReservationMode))
	}
	if typ, backend, ok := masqPlugin(a); ok && slices.ContainsFunc(h.Missing, func(m Missing) bool { return m.Plugin == typ && m.Restore == ByCninet }) {
		if backend == "nftables" {
			done(typ, ByCninet, c.masqueradeNFT(a))
		} else {
			done(typ, ByCninet, c.masqueradeIPT(a))
		}
	}
	for _, typ := range h.Plugins() {
		if typ == "portmap" && a.backend("portmap") == "nftables" {
			if err := c.dropOwnHostportRules(a); err != nil {
				done(typ, ByPlugin, err)
				continue
			}
		}
		done(typ, ByPlugin, wrapRestore(typ+"'s ADD", r.PluginADD(typ)))
	}
	return restored, errors.Join(errs...)
}

func wrapRestore(what string, err error) error {
	if err != nil {
		return fmt.Errorf("restoring %s: %w", what, err)
	}
	return nil
}

// reserve writes each missing reservation of a's addresses as host-local
// does ("ID\r\nIFNAME", created only where no file is), under
// host-local's lock. One that appeared meanwhile naming another holder
// is that holder's: an error, and nothing is written over it.
func (c *Checker) reserve(a *Live, mode os.FileMode) error {
	var errs []error
	for _, p := range a.allAddrs() {
		path, holder, err := reservationOf(a.Net, p.Addr())
		if err != nil || holder == a.ID {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, c.reserveAt(a, path, mode))
	}
	return errors.Join(errs...)
}

// reserveAt writes one reservation file under host-local's lock.
func (c *Checker) reserveAt(a *Live, path string, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("restoring host-local's reservation %s: %w", path, err)
	}
	unlock, err := lockDir(c.ctx, dir)
	if err != nil {
		return fmt.Errorf("restoring host-local's reservation %s: %w", path, err)
	}
	defer unlock()
	err = CreateWhole(path, []byte(strings.TrimSpace(a.ID)+"\r\n"+a.IfName), mode)
	if errors.Is(err, os.ErrExist) {
		if holder, _ := reservationHolder(path); holder == a.ID {
			return nil
		}
		return fmt.Errorf("restoring host-local's reservation %s: %w: another attachment reserved the address meanwhile", path, ErrNotInPlace)
	}
	if err != nil {
		return fmt.Errorf("restoring host-local's reservation %s: %w", path, err)
	}
	return nil
}

// createExclusive creates path holding body, only where no file is, with
// an exclusive create and a write; a write that fails removes it.
func createExclusive(path string, body []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// masqueradeIPT writes the masquerade chain and rules of each of a's
// addresses where they are missing, with the commands pkg/ip's
// SetupIPMasq runs: the chain if it is not there, then each rule unless
// it exists, appended.
func (c *Checker) masqueradeIPT(a *Live) error {
	var errs []error
	for _, v6 := range []bool{false, true} {
		addrs := a.addrs(v6)
		if len(addrs) == 0 {
			continue
		}
		ipt, err := c.host.IPTables(v6)
		if err != nil {
			errs = append(errs, fmt.Errorf("restoring the masquerade rules: %s: %w", familyName(v6), err))
			continue
		}
		w, ok := iptables.BindContext(c.ctx, ipt).(host.RuleWriter)
		if !ok {
			errs = append(errs, fmt.Errorf("restoring the masquerade rules: %s cannot write rules (no host.RuleWriter)", familyName(v6)))
			continue
		}
		chain, comment := a.MasqChain(), a.MasqComment()
		for _, p := range addrs {
			errs = append(errs, ensureChain(w, "nat", chain),
				appendUnique(w, "nat", chain, "-d", p.String(), "-j", "ACCEPT", "-m", "comment", "--comment", comment),
				appendUnique(w, "nat", chain, "!", "-d", multicastNet(v6), "-j", "MASQUERADE", "-m", "comment", "--comment", comment),
				appendUnique(w, "nat", postrouting, "-s", p.Addr().String(), "-j", chain, "-m", "comment", "--comment", comment))
		}
	}
	return errors.Join(errs...)
}

func ensureChain(w host.RuleWriter, table, chain string) error {
	exists, err := w.ChainExists(table, chain)
	if err == nil && !exists {
		err = w.NewChain(table, chain)
	}
	if err != nil {
		return fmt.Errorf("restoring chain %s %s: %w", table, chain, err)
	}
	return nil
}

func appendUnique(w host.RuleWriter, table, chain string, spec ...string) error {
	exists, err := w.Exists(table, chain, spec...)
	if err == nil && !exists {
		err = w.Append(table, chain, spec...)
	}
	if err != nil {
		return fmt.Errorf("restoring rule %s %s %s: %w", table, chain, strings.Join(spec, " "), err)
	}
	return nil
}

// masqueradeNFT writes, in one nftables transaction, what pkg/ip's
// nftables SetupIPMasqForNetworks writes for a: the table and its chains,
// postrouting's rules again (flushed and added back in the same
// transaction, so no packet ever sees it without them), and a's own
// masquerade rules, replacing what is left of them. The script is
// knftables' rendering of the same operations, so nft stores the rules
// as the plugin's.
func (c *Checker) masqueradeNFT(a *Live) error {
	nft, runner, err := c.nftScripting()
	if err != nil {
		return fmt.Errorf("restoring the masquerade rules: %w", err)
	}
	rules, err := nft.ListRules(c.ctx, []host.NFTable{nftMasqTable})
	if err != nil {
		return fmt.Errorf("restoring the masquerade rules: listing %s: %w", nftMasqTable, err)
	}
	comment := a.NFTMasqComment(a.IfName)
	hash, _, _ := strings.Cut(comment, ",")
	tx := knftables.NewFake(knftables.InetFamily, nftMasqTable.Name).NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("Masquerading for plugins from github.com/containernetworking/plugins")})
	tx.Add(&knftables.Chain{Name: nftMasqChain, Comment: knftables.PtrTo("Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet")})
	tx.Add(&knftables.Chain{Name: "postrouting", Type: knftables.PtrTo(knftables.NATType), Hook: knftables.PtrTo(knftables.PostroutingHook),
		Priority: knftables.PtrTo(knftables.SNATPriority)})
	tx.Flush(&knftables.Chain{Name: "postrouting"})
	tx.Add(&knftables.Rule{Chain: "postrouting", Rule: "ip daddr == 224.0.0.0/4  return"})
	tx.Add(&knftables.Rule{Chain: "postrouting", Rule: "ip6 daddr == ff00::/8  return"})
	tx.Add(&knftables.Rule{Chain: "postrouting", Rule: knftables.Concat("goto", nftMasqChain)})
	for _, r := range rules {
		if r.Chain == nftMasqChain && strings.HasPrefix(r.Comment, hash) {
			tx.Delete(&knftables.Rule{Chain: nftMasqChain, Handle: knftables.PtrTo(r.Handle)})
		}
	}
	for _, p := range a.allAddrs() {
		ip := "ip"
		if p.Addr().Is6() {
			ip = "ip6"
		}
		tx.Add(&knftables.Rule{Chain: nftMasqChain, Rule: knftables.Concat(ip, "saddr", "==", p.Addr(), ip, "daddr", "!=", p.Masked(), "masquerade"),
			Comment: knftables.PtrTo(comment)})
	}
	script := tx.String()
	if strings.Contains(script, "# ERROR") {
		return fmt.Errorf("restoring the masquerade rules: %s", script)
	}
	if err := runner.RunScript(c.ctx, script); err != nil {
		return fmt.Errorf("restoring the masquerade rules on nftables: %w", err)
	}
	return nil
}

// nftScripting opens nftables for a repair that writes.
func (c *Checker) nftScripting() (host.NFTables, host.NFTScriptRunner, error) {
	if c.host.NFTables == nil {
		return nil, nil, host.ErrNFTablesMissing
	}
	nft, err := c.host.NFTables()
	if err != nil {
		return nil, nil, err
	}
	runner, ok := nft.(host.NFTScriptRunner)
	if !ok {
		return nil, nil, errors.New("the NFTables seam cannot run a script (no host.NFTScriptRunner)")
	}
	return nft, runner, nil
}

// dropOwnHostportRules deletes what is left of a's own hostport rules
// (ownHostportRules), each by its handle, so that portmap's ADD, which
// adds every rule of the attachment without looking for it, leaves one
// of each. Only the attachment's own go: its workload is without them
// until the ADD runs, and no neighbour ever is.
func (c *Checker) dropOwnHostportRules(a *Live) error {
	if c.host.NFTables == nil {
		return nil
	}
	nft, err := c.host.NFTables()
	if errors.Is(err, host.ErrNFTablesMissing) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("restoring portmap's rules: %w", err)
	}
	rules, err := nft.ListRules(c.ctx, nftHostportTables[:])
	if err != nil {
		return fmt.Errorf("restoring portmap's rules: listing them: %w", err)
	}
	var errs []error
	for _, t := range nftHostportTables {
		var own []host.NFTRule
		for _, r := range ownHostportRules(rules, a) {
			if r.Family == t.Family && r.Table == t.Name {
				own = append(own, r)
			}
		}
		if len(own) > 0 {
			if err := nft.DeleteRules(c.ctx, t, own); err != nil {
				errs = append(errs, fmt.Errorf("restoring portmap's rules: deleting what is left of them in %s: %w", t, err))
			}
		}
	}
	return errors.Join(errs...)
}

// A batched repair writes the iptables rules and chains many attachments
// lack in one iptables-restore per family and table, rather than each
// plugin's ADD per attachment (tens of iptables processes each, every one
// reading the whole table): after a firewall reload, a hundred
// attachments are whole again in one transaction per table. It writes a
// rule only with the words its plugin writes it with, in the plugin's
// order and place (appended, or first where the plugin inserts it first),
// so the host holds what the plugins' ADD would have written again.
// An attachment is in the batch only when every iptables piece it lacks
// is such a rule or a chain, and a rule of its own chains only with the
// chain itself (what is left of a chain would put the rules written
// again after it, out of the plugin's order). Chains are created with
// -N, which fails the table's whole transaction when one appeared
// meanwhile: then nothing of it is written, and the plugins' ADD repairs
// as before.

// ruleWrite is one missing iptables piece a batch writes: a chain (rule
// nil) or a rule of it, in family v6.
type ruleWrite struct {
	missing      int // its index in Health.Missing
	v6           bool
	table, chain string
	rule         *wantRule
}

// line is the iptables-restore line that writes w.
func (w ruleWrite) line() string {
	if w.rule == nil {
		return "-N " + w.chain
	}
	var b strings.Builder
	if w.rule.head {
		b.WriteString("-I " + w.chain + " 1")
	} else {
		b.WriteString("-A " + w.chain)
	}
	for _, arg := range w.rule.args {
		b.WriteByte(' ')
		b.WriteString(restoreQuote(arg))
	}
	return b.String()
}

// restoreQuote is arg as iptables-restore reads it back as one word:
// quoted, with its quotes and backslashes escaped, where it holds a space
// or either of them (iptables-save's own quoting of a comment).
func restoreQuote(arg string) string {
	if arg != "" && !strings.ContainsAny(arg, " \t\"\\'") {
		return arg
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(arg) + `"`
}

// RulePlan is a batched repair's writing: per family and table, the
// iptables-restore lines, the chains first; and which of the healths it
// was planned from it writes every missing iptables piece of. String
// prints it.
type RulePlan struct {
	// Members are the indices of the healths the plan restores the
	// iptables rules and chains of.
	Members []int
	tables  []planTable
}

// planTable is one iptables-restore of a plan.
type planTable struct {
	v6    bool
	table string
	lines []string
}

// PlanRules plans the batched repair of hs (see the head of this part of
// the file); an attachment whose check was incomplete, that cannot be
// repaired in place, or that lacks an iptables piece cninet does not
// know every word of is left out, for the plugins' ADD.
func PlanRules(hs []Health) RulePlan {
	type tableKey struct {
		v6    bool
		table string
	}
	var plan RulePlan
	byTable := map[tableKey]*planTable{}
	chains, rules := map[tableKey][]string{}, map[tableKey][]string{}
	seen := map[string]bool{}
	for i, h := range hs {
		writes, ok := batchable(h)
		if !ok {
			continue
		}
		plan.Members = append(plan.Members, i)
		for _, w := range writes {
			k := tableKey{w.v6, w.table}
			if byTable[k] == nil {
				byTable[k] = &planTable{v6: w.v6, table: w.table}
			}
			line := w.line()
			key := fmt.Sprint(w.v6, w.table, line)
			if seen[key] {
				continue // a shared chain or rule another attachment lacks too
			}
			seen[key] = true
			if w.rule == nil {
				chains[k] = append(chains[k], line)
			} else {
				rules[k] = append(rules[k], line)
			}
		}
	}
	for k, t := range byTable {
		t.lines = append(chains[k], rules[k]...)
		plan.tables = append(plan.tables, *t)
	}
	// IPv4 first, and nat before filter: the host ports answer again
	// soonest.
	slices.SortFunc(plan.tables, func(a, b planTable) int {
		switch {
		case a.v6 != b.v6:
			if a.v6 {
				return 1
			}
			return -1
		case a.table != b.table:
			return strings.Compare(b.table, a.table) // nat, then filter
		}
		return 0
	})
	return plan
}

// batchable returns the writes of h's missing iptables pieces, false
// when a batch cannot write them all (see PlanRules) or h lacks none.
func batchable(h Health) ([]ruleWrite, bool) {
	if h.Err != nil || !h.InPlace() {
		return nil, false
	}
	byMissing := make(map[int]ruleWrite, len(h.writes))
	missingChain := map[string]bool{}
	for _, w := range h.writes {
		byMissing[w.missing] = w
		if w.rule == nil {
			missingChain[fmt.Sprint(w.v6, w.table, w.chain)] = true
		}
	}
	var out []ruleWrite
	for i, m := range h.Missing {
		if m.Backend != "iptables" && m.Backend != "ip6tables" {
			continue
		}
		w, ok := byMissing[i]
		switch {
		case !ok, w.rule != nil && w.rule.args == nil:
			return nil, false
		case w.rule != nil && w.rule.own && !missingChain[fmt.Sprint(w.v6, w.table, w.chain)]:
			return nil, false // what is left of its own chain would come first
		}
		out = append(out, w)
	}
	return out, len(out) > 0
}

// String prints the plan: each iptables-restore's input, IPv4's as
// iptables-restore's and IPv6's as ip6tables-restore's.
func (p RulePlan) String() string {
	var b strings.Builder
	for _, t := range p.tables {
		fmt.Fprintf(&b, "# %s-restore --noflush\n*%s\n%s\nCOMMIT\n", familyName(t.v6), t.table, strings.Join(t.lines, "\n"))
	}
	return b.String()
}

// RestoreRules writes the plan of hs (PlanRules), one iptables-restore
// per family and table, and returns its members. A table whose
// transaction fails (a chain it creates appeared meanwhile, the lock)
// writes nothing; the tables before it stay written, and the error says
// which failed: the caller checks the members again.
func (c *Checker) RestoreRules(hs []Health) ([]int, error) {
	plan := PlanRules(hs)
	var errs []error
	for _, t := range plan.tables {
		ipt, err := c.host.IPTables(t.v6)
		if err != nil {
			errs = append(errs, fmt.Errorf("restoring %s rules: %w", familyName(t.v6), err))
			continue
		}
		r, ok := iptables.BindContext(c.ctx, ipt).(host.Restorer)
		if !ok {
			errs = append(errs, fmt.Errorf("restoring %s rules: it cannot restore a batch (no host.Restorer)", familyName(t.v6)))
			continue
		}
		if err := r.RestoreNoFlush(t.table, t.lines); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s's %s rules of %d attachments in one batch: %w", familyName(t.v6), t.table, len(plan.Members), err))
		}
	}
	return plan.Members, errors.Join(errs...)
}
