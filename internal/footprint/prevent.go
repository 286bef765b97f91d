package footprint

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/seed1280861d/cninet/host"
)

// The prevention rule. Some plugins' DEL deletes by something other than
// the attachment's own identity: the firewall plugin by the addresses of
// the cached result libcni hands it as prevResult (stale after a reboot
// that kept libcni's cache but not host-local's reservations: a live
// workload may hold them now), portmap's nftables backend by the bare
// container id, on every network. No such DEL is ever run as it is.
// Before it, Prevent decides what the DEL may see, and makes it so:
//
//   - the cached result keeps only the addresses the attachment provably
//     still owns: on a network with host-local IPAM, those reserved for
//     it (the reservation stands until the IPAM plugin's DEL, which runs
//     after the firewall plugin's, so nobody can take the address
//     meanwhile), and in every case none that another attachment holds
//     now. The rest is withheld: written to an intent record first
//     (withheld.go), then taken out of the cached result, each write
//     atomic, so a process killed at any point leaves a state the next
//     Teardown or GC finishes. The force cleanup removes their rules by
//     the ownership rule;
//   - portmap is left out of the DEL chain (Prevention.Omit) when its
//     nftables backend would find rules of the same id that are not the
//     attachment's: the force cleanup removes exactly the attachment's,
//     proven by address.
//
// Nothing a DEL removes is therefore ever another attachment's, at any
// instant, whatever process dies when; nothing is added back.

// Prevention is what the DEL of the attachments may be handed, decided
// and made so by Prevent.
type Prevention struct {
	// Omit are the plugin types to leave out of the network's DEL chain:
	// their DEL would reach another attachment's state.
	Omit []string
	// Withheld are the addresses taken out of each attachment's cached
	// result: the DEL does not see them, the force cleanup removes their
	// rules where the attachment owns them.
	Withheld map[Attachment][]netip.Addr
}

// preventing is a footprint whose plugin's DEL deletes by something other
// than the attachment's own identity: prevent decides, before the DEL,
// what of the DEL's input must change so that it cannot reach another
// attachment's state.
type preventing interface {
	prevent(v *view, set attSet, pv *prevention)
}

// prevention collects what the preventing footprints decide.
type prevention struct {
	omit     []string
	withhold map[string]*withholding // by cached result path
}

// withholding is what to take out of one cached result.
type withholding struct {
	att   Attachment
	cache cachedResult
	addrs addrSet
}

func (pv *prevention) omitPlugin(typ string) {
	if !slices.Contains(pv.omit, typ) {
		pv.omit = append(pv.omit, typ)
	}
}

func (pv *prevention) withholdAddr(c cachedResult, a netip.Addr) {
	if pv.withhold == nil {
		pv.withhold = map[string]*withholding{}
	}
	w := pv.withhold[c.path]
	if w == nil {
		w = &withholding{att: c.att(), cache: c, addrs: addrSet{}}
		pv.withhold[c.path] = w
	}
	w.addrs[a] = true
}

// Prevent makes ids' DEL on the cleaner's network unable to reach another
// attachment's state (see Prevention), and reads what the DEL will erase:
// the attachments' files, the proof of their addresses for Clean. An
// error says either could not be done: the DEL must not run (Clean still
// may). A missing iptables is no error: the plugins cannot change what is
// not there.
func (c *Cleaner) Prevent(ids []string) (Prevention, error) { return c.PreventAll(c.attachments(ids)) }

// PreventAll is Prevent for attachments of any known network (a GC,
// before libcni's GC DELs the stale ones).
func (c *Cleaner) PreventAll(atts []Attachment) (Prevention, error) {
	errs := &errList{}
	set := c.set(atts)
	v := newView(c.ctx, c.host, c.nets, c.whole, errs)
	if c.whole { // many attachments: reading everything once is cheapest
		v.files = scanAllFiles(v)
		v.prior = v.files.of(set)
		for _, dir := range cacheDirs(c.nets) {
			removeStaleTemps(dir)
		}
	} else {
		v.prior = scanFilesOf(v, set)
	}
	c.prior = v.prior
	if err := c.recordProof(set); err != nil {
		return Prevention{}, err
	}
	v.wholeWorkload = c.WholeWorkload
	v.nft.brief = c.whole && c.WholeWorkload
	v.nft.keepSeen = c.RecheckByHandle && !c.whole
	pv := &prevention{}
	for _, fp := range footprints {
		if p, ok := fp.(preventing); ok {
			p.prevent(v, set, pv)
		}
	}
	if err := errs.errExcept(host.ErrIPTablesMissing); err != nil {
		return Prevention{}, err
	}
	if c.RecheckByHandle && !c.whole {
		c.seen = v.nft.seen
	}
	out := Prevention{Omit: pv.omit}
	var werrs []error
	for _, path := range sortedKeys(pv.withhold) {
		w := pv.withhold[path]
		if err := c.withhold(w); err != nil {
			werrs = append(werrs, err)
			continue
		}
		if out.Withheld == nil {
			out.Withheld = map[Attachment][]netip.Addr{}
		}
		out.Withheld[w.att] = append(out.Withheld[w.att], sortedAddrs(w.addrs)...)
	}
	return out, errors.Join(werrs...)
}

// recordProof records, before any DEL, every address the set's files
// prove (c.prior) in the proof store: the DEL erases those files, and a
// process killed after it must not lose the proof. Without a store the
// intent records of withhold keep what the DEL is not shown.
func (c *Cleaner) recordProof(set attSet) error {
	if c.host.Proofs == nil {
		return nil
	}
	byAtt := c.prior.addrsByAttachment(set)
	var errs []error
	for _, att := range set.sorted() {
		if addrs := byAtt[att]; len(addrs) > 0 {
			if err := c.host.Proofs.Record(att, uniqueAddrs(addrs)); err != nil {
				errs = append(errs, fmt.Errorf("recording the proof of %s before its DEL: %w", att, err))
			}
		}
	}
	return errors.Join(errs...)
}

// withhold writes the intent record (where no proof store recorded the
// addresses already), then takes the addresses out of the cached result;
// the record is also kept as proof for Clean.
func (c *Cleaner) withhold(w *withholding) error {
	addrs := sortedAddrs(w.addrs)
	cacheDir := c.nets[w.att.Network].CacheDir
	if c.host.Proofs != nil {
		if err := withholdFromCache(cacheDir, w.cache.path, w.addrs); err != nil {
			return fmt.Errorf("withholding %v from the DEL of %s: %w", addrs, w.att, err)
		}
		return nil
	}
	if err := writeRecord(cacheDir, w.att, w.cache.ifName, addrs); err != nil {
		return fmt.Errorf("withholding %v from the DEL of %s: %w", addrs, w.att, err)
	}
	c.prior.records = append(c.prior.records, intentRecord{net: w.att.Network, id: w.att.ID, ifName: w.cache.ifName,
		path: recordPath(cacheDir, w.att.Network, w.att.ID), addrs: addrs})
	if err := withholdFromCache(cacheDir, w.cache.path, w.addrs); err != nil {
		return fmt.Errorf("withholding %v from the DEL of %s: %w", addrs, w.att, err)
	}
	return nil
}

// HostportDELReachesOnlySet reports whether portmap's nftables DEL of the
// attachments' ids, which deletes every hostport rule carrying one of
// them on every network, would reach only rules of the attachments
// themselves: no rule of those ids carries an address none of them held.
// A whole workload that leaves several networks (Teardown, a Setup's
// rollback) then runs that DEL once for all of them, instead of proving
// each rule by address (see the prevention rule). An error says the
// rules could not be read: the answer is no.
func (c *Cleaner) HostportDELReachesOnlySet(atts []Attachment) (bool, error) {
	errs := &errList{}
	set := c.set(atts)
	v := newView(c.ctx, c.host, c.nets, false, errs)
	v.prior = scanFilesOf(v, set)
	foreign := foreignIDRules(v, set)
	if err := errs.errExcept(host.ErrIPTablesMissing); err != nil {
		return false, err
	}
	return len(foreign) == 0, nil
}

// cacheDirs returns the cache directories of nets, each once.
func cacheDirs(nets map[string]Network) []string {
	var dirs []string
	for _, n := range sortedNets(nets) {
		if n.CacheDir != "" && !slices.Contains(dirs, n.CacheDir) {
			dirs = append(dirs, n.CacheDir)
		}
	}
	return dirs
}
