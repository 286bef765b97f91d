package thick

import (
	"fmt"
	"time"
)

// How long the shim waits for the daemon, so that a daemon that is
// stopped (SIGSTOP), deadlocked or swamped never hangs a runtime.
const (
	// SilenceLimit is how long the shim waits for the daemon's first
	// response headers (its acknowledgement, StatusAcknowledged, or a
	// final answer), counted from the start of its request, the dial and
	// the sending of the request included. A daemon silent that long is
	// treated like one that cannot be reached: a DEL runs in the shim, the
	// other commands fail. The daemon acknowledges before it queues, so a
	// busy daemon is never silent.
	SilenceLimit = 5 * time.Second
	// AnswerGrace is how long past the request's Deadline the shim still
	// waits for the final answer, so that the daemon's own answer ("the
	// deadline passed", code 11, saying where) arrives before the shim
	// gives up with its own.
	AnswerGrace = 2 * time.Second
	// DefaultShimTimeout is the shim's Deadline for ADD, DEL and GC
	// without a "timeout": the daemon's default deadline (DefaultTimeout),
	// so that a burst queued in the daemon is served, not abandoned.
	DefaultShimTimeout = DefaultTimeout
	// DefaultProbeTimeout is the shim's Deadline for CHECK and STATUS
	// without a "timeout": runtimes ask these periodically (STATUS before
	// every pod start in containerd), and a runtime should hear "not now"
	// well before the next round instead of queueing rounds.
	DefaultProbeTimeout = 30 * time.Second
)

// Limits are how long the shim waits for the daemon in one request.
type Limits struct {
	// Silence: for the first response headers (SilenceLimit, or Timeout
	// when shorter).
	Silence time.Duration
	// Timeout: for the final answer, sent as the request's Deadline.
	Timeout time.Duration
}

// ShimLimits are the shim's limits for command under conf: its
// "timeout" (a Go duration, e.g. "30s", more than zero) for every
// command, else DefaultShimTimeout (ADD, DEL, GC) or DefaultProbeTimeout
// (CHECK, STATUS). A "timeout" that is no positive duration is an error
// wrapping ErrBadRequest and naming the key.
func ShimLimits(conf *NetConf, command string) (Limits, error) {
	timeout := DefaultShimTimeout
	if command == CmdCheck || command == CmdStatus {
		timeout = DefaultProbeTimeout
	}
	if conf.Timeout != "" {
		d, err := time.ParseDuration(conf.Timeout)
		if err != nil || d <= 0 {
			return Limits{}, fmt.Errorf(`%w: cninet-shim config key "timeout" is %q, want a positive Go duration such as "30s" or "2m"`, ErrBadRequest, conf.Timeout)
		}
		timeout = d
	}
	return Limits{Silence: min(SilenceLimit, timeout), Timeout: timeout}, nil
}
