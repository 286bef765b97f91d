package footprint

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// NFTHandleDeleter is an optional extension of NFTables: delete listed
// rules of one table by handle and say what became of each. A rule is
// deleted only while the rule with its handle is still the one listed:
// same chain and comment, and every address the listing gave it (Saddr,
// Daddr, DNAT) in its expressions; otherwise it is left NotDeleted. A
// rule nf_tables no longer has is AlreadyGone. The outcomes line up with
// rules.
type NFTHandleDeleter interface {
	DeleteByHandle(ctx context.Context, table NFTable, rules []NFTRule) ([]HandleOutcome, error)
}

// DeleteByHandle implements NFTHandleDeleter over netlink: one dump of
// each chain involved, then batches of deletions by handle at the
// generation of that dump.
func (h *hostNFTables) DeleteByHandle(ctx context.Context, table NFTable, rules []NFTRule) ([]HandleOutcome, error) {
	if err := ctx.Err(); err != nil {
		return make([]HandleOutcome, len(rules)), err
	}
	targets := make([]ruleTarget, len(rules))
	for i, r := range rules {
		targets[i] = ruleTarget{chain: r.Chain, pos: -1, handle: uint64(max(r.Handle, 0)), comment: r.Comment}
		for _, a := range []netip.Addr{r.Saddr, r.Daddr, r.DNAT} {
			if a.IsValid() {
				targets[i].needles = append(targets[i].needles, a.Unmap().AsSlice())
			}
		}
	}
	return nfDeleteRules(table.Family, table.Name, targets)
}

// DeleteRules implements NFTables by handle over netlink (DeleteByHandle).
// The deletions go in batches of a few hundred, each one transaction, so
// on an error the rules of batches before it are gone; the error names
// every rule that was not deleted.
func (h *hostNFTables) DeleteRules(ctx context.Context, table NFTable, rules []NFTRule) error {
	out, err := h.DeleteByHandle(ctx, table, rules)
	var left []string
	for i, o := range out {
		if o != Deleted {
			left = append(left, rules[i].String())
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("nftables: deleting from %s: %w", table, err)
	case len(left) > 0:
		return fmt.Errorf("nftables: %d rules of %s not deleted (gone, or no longer as listed): %s: %w",
			len(left), table, strings.Join(left[:min(len(left), 3)], "; "), errNFTRuleNotFound)
	}
	return nil
}

// errNFTRuleNotFound says a rule to delete was not there as listed; it
// reads as nft's own answer for a rule already gone (isNFTNotFound).
var errNFTRuleNotFound = fmt.Errorf("rule not found")
