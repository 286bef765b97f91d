package cninet

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/seed1280861d/cninet/internal/iptables"
)

// lockRetryPause is the pause before a cleanup step that met a held
// xtables lock runs again: short, since each iptables command of the
// step waits for the lock itself (-w) until the context's deadline, and
// the step failed only because that wait, in whole seconds, ran out
// before the deadline did; jittered so that the steps of concurrent
// Teardowns that failed together do not queue again together.
const lockRetryPause = 50 * time.Millisecond

// whileLockHeld runs step until it succeeds, fails on anything but a
// held xtables lock (iptables.LockWaitRanOut), or ctx's deadline is too
// close for another try. A busy host's other writers (kube-proxy, a
// firewall manager) take the lock in bursts: a step that missed a gap
// while its caller still had time waits for the next one rather than
// report the rules it could not reach as left behind. Without a deadline
// the step is not repeated: its commands' lock waits together were
// already bounded by host.DefaultLockWait. The step must be safe to run
// again: every cleanup step is, as a command that did not have the lock
// changed nothing.
func whileLockHeld[T any](ctx context.Context, step func() (T, error)) (T, error) {
	deadline, bounded := ctx.Deadline()
	for {
		v, err := step()
		if !bounded || !iptables.LockWaitRanOut(err) {
			return v, err
		}
		pause := lockRetryPause/2 + rand.N(lockRetryPause/2+1)
		if time.Until(deadline) <= pause {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(pause):
		}
	}
}
