package thick

import (
	"fmt"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// How long the shim waits for the daemon (see thickwire, which the shim
// reads them from).
const (
	SilenceLimit        = thickwire.SilenceLimit
	AnswerGrace         = thickwire.AnswerGrace
	DefaultShimTimeout  = thickwire.DefaultTimeout
	DefaultProbeTimeout = thickwire.DefaultProbeTimeout
)

// Limits are how long the shim waits for the daemon in one request.
type Limits = thickwire.Limits

// ShimLimits are the shim's limits for command under conf (its
// "timeout"; see thickwire.ShimLimits). A "timeout" that is no positive
// duration is an error wrapping ErrBadRequest and naming the key.
func ShimLimits(conf *NetConf, command string) (Limits, error) {
	limits, err := thickwire.ShimLimits(command, conf.Timeout)
	if err != nil {
		return Limits{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return limits, nil
}
