package footprint

import (
	"context"
	"errors"

	"github.com/seed1280861d/cninet/host"
)

// cutShort reports whether a run's error says it could not finish with
// the rules because its context ended or the xtables lock could not be
// had. The attachments' reservations and cached results then stay:
// they are the proof of the addresses that a later Teardown or GC needs to
// judge the comment-less rules left behind, and host-local's reservation
// keeps the address from a new workload, whose rules would look the same,
// until then. A context that ends after the rules are done cuts nothing
// short: the files go.
func cutShort(err error) bool {
	return errors.Is(err, host.ErrXtablesLock) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
