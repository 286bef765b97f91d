package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

// DeleteByHandle implements NFTHandleDeleter over netlink: one dump of
// each chain involved, then batches of deletions by handle at the
// generation of that dump.
func (h *hostNFTables) DeleteByHandle(ctx context.Context, table host.NFTable, rules []host.NFTRule) ([]host.HandleOutcome, error) {
	if err := ctx.Err(); err != nil {
		return make([]host.HandleOutcome, len(rules)), err
	}
	targets := make([]nfnetlink.Target, len(rules))
	for i, r := range rules {
		targets[i] = nfnetlink.Target{Chain: r.Chain, Pos: -1, Handle: uint64(max(r.Handle, 0)), Comment: r.Comment}
		for _, a := range []netip.Addr{r.Saddr, r.Daddr, r.DNAT} {
			if a.IsValid() {
				targets[i].Needles = append(targets[i].Needles, a.Unmap().AsSlice())
			}
		}
	}
	return nfnetlink.DeleteRules(table.Family, table.Name, targets)
}

// DeleteRules implements NFTables by handle over netlink (DeleteByHandle).
// The deletions go in batches of a few hundred, each one transaction, so
// on an error the rules of batches before it are gone; the error names
// every rule that was not deleted.
func (h *hostNFTables) DeleteRules(ctx context.Context, table host.NFTable, rules []host.NFTRule) error {
	out, err := h.DeleteByHandle(ctx, table, rules)
	var left []string
	for i, o := range out {
		if o != host.Deleted {
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
