package hostwork

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadClock is what the kernel counts for the calling thread: its CPU
// time and how often it gave up its CPU (voluntary: to wait for I/O, a
// netlink answer, a lock) or had it taken (involuntary: preempted for
// another runnable thread). One getrusage and one gettid: a few
// microseconds.
type threadClock struct {
	tid                    int
	cpu                    time.Duration
	voluntary, involuntary int64
	ok                     bool
}

func readThreadClock() threadClock {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return threadClock{}
	}
	return threadClock{tid: unix.Gettid(), cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		voluntary: ru.Nvcsw, involuntary: ru.Nivcsw, ok: true}
}
