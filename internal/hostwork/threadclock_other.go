//go:build !linux

package hostwork

import "time"

// threadClock is unknown off Linux: steps are timed, not taken apart.
type threadClock struct {
	tid                    int
	cpu                    time.Duration
	voluntary, involuntary int64
	ok                     bool
}

func readThreadClock() threadClock { return threadClock{} }
