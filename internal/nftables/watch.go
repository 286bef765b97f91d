package nftables

import (
	"context"

	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

// WatchChanges implements NFTChangeWatcher over netlink: a subscription
// to nf_tables' notifications in the calling goroutine's network
// namespace (nfnetlink.WatchChanges), which costs nothing while nothing
// changes. A signal stands for one removal or more (additions are not
// signalled); a burst (a flush is one notification per rule) is for the
// caller to debounce.
func (h *hostNFTables) WatchChanges(ctx context.Context) (<-chan struct{}, error) {
	return nfnetlink.WatchChanges(ctx)
}
