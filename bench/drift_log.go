package main

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
)

// driftLog reads the repair watcher's log (Info and above): when each
// attachment was repaired, as the line arrived, how often the watcher
// refused to repair a drift that keeps coming back, and the repairs that
// failed.
type driftLog struct {
	mu       sync.Mutex
	repaired []repairSeen
	refused  int
	failed   []string // the first driftMaxFailures, verbatim but for the time
	nFailed  int
}

// repairSeen is one "attachment repaired" line.
type repairSeen struct {
	at time.Time
	id string
}

const driftMaxFailures = 5

var repairedLine = regexp.MustCompile(`attachment repaired: alloc_id=(\S+)`)

func (l *driftLog) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch m := repairedLine.FindSubmatch(p); {
	case m != nil:
		l.repaired = append(l.repaired, repairSeen{now, string(m[1])})
	case bytes.Contains(p, []byte("not repairing it for now")), bytes.Contains(p, []byte("not trying it again for now")):
		l.refused++
	case bytes.Contains(p, []byte("[ERROR]")), bytes.Contains(p, []byte("[WARN]")):
		l.nFailed++
		if len(l.failed) < driftMaxFailures {
			line := string(bytes.TrimSpace(p))
			if _, rest, ok := strings.Cut(line, " "); ok { // the time
				line = rest
			}
			l.failed = append(l.failed, line)
		}
	}
	return len(p), nil
}

// repairCount is the repairs logged so far.
func (l *driftLog) repairCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.repaired)
}

// refusals is the refusals logged so far.
func (l *driftLog) refusals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refused
}

// failures is the failed repairs logged, the first few verbatim.
func (l *driftLog) failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.failed...)
	if l.nFailed > len(out) {
		out = append(out, fmt.Sprintf("… and %d more", l.nFailed-len(out)))
	}
	return out
}

// allRepaired waits until n distinct attachments were logged repaired
// since t0, at most until limit after t0: how long after t0 the n-th
// was (0: not within the limit), and the repairs logged since t0.
func (l *driftLog) allRepaired(t0 time.Time, n int, limit time.Duration) (whole time.Duration, repairs int) {
	for {
		whole, repairs = l.since(t0, n)
		if whole > 0 || time.Since(t0) >= limit {
			return whole, repairs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// since is when, after t0, the n-th distinct attachment was logged
// repaired (0: not yet), and the repairs logged since t0.
func (l *driftLog) since(t0 time.Time, n int) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	repairs := 0
	var nth time.Duration
	for _, r := range l.repaired {
		if r.at.Before(t0) {
			continue
		}
		repairs++
		if !seen[r.id] {
			seen[r.id] = true
			if len(seen) == n {
				nth = r.at.Sub(t0)
			}
		}
	}
	return nth, repairs
}
