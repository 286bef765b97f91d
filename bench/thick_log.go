package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// thickLog reads the cninet daemon's log (text format, debug level) as
// the daemon writes it to its stderr: each request's line (its duration,
// its wait for a slot and when it was written) and cninet's timed phases,
// both by container id. Warnings and errors go on to the bench's stderr.
type thickLog struct {
	mu       sync.Mutex
	lines    lineSplitter
	requests map[string]daemonRequest // by container id and command: "ID ADD"
	steps    map[string]moments       // likewise, from the "request steps" lines
	phases   map[string]*cyclePhases  // by container id (alloc_id)
	seen     chan struct{}            // signalled on every request line
}

// daemonRequest is one request line of the daemon, and its steps.
type daemonRequest struct {
	at               time.Time // the line's time: the answer was written just after
	duration, queued time.Duration
	steps            moments // from its "request steps" line
}

// start is when the daemon began handling the request.
func (r daemonRequest) start() time.Time { return r.at.Add(-r.duration) }

// requestLine is the daemon's line per request (thick.Server.logRequest);
// hclog quotes a duration with a non-ASCII unit (µs).
var requestLine = regexp.MustCompile(`^(\S+) \[INFO\]\s+cninet-daemon: request: command=(\w+) container_id=(\S+) .*duration="?([^"\s]+)"? queued="?([^"\s]+)"?`)

func newThickLog() *thickLog {
	return &thickLog{requests: map[string]daemonRequest{}, steps: map[string]moments{}, phases: map[string]*cyclePhases{}, seen: make(chan struct{}, 1)}
}

// Write takes what the daemon wrote, in pieces of any size, line by line.
func (l *thickLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines.feed(p, l.line)
	return len(p), nil
}

// lineSplitter hands what a process writes, in pieces of any size, on one
// whole line (its newline kept) at a time. Its owner locks it.
type lineSplitter struct{ partial []byte }

func (s *lineSplitter) feed(p []byte, line func([]byte)) {
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			return
		}
		line(s.partial[:i+1])
		s.partial = s.partial[i+1:]
	}
}

func (l *thickLog) line(p []byte) {
	if bytes.Contains(p, []byte("[WARN]")) || bytes.Contains(p, []byte("[ERROR]")) {
		os.Stderr.Write(p)
	}
	if key, m, ok := daemonSteps(p); ok {
		l.steps[key] = m
		select {
		case l.seen <- struct{}{}:
		default:
		}
		return
	}
	if m := requestLine.FindSubmatch(p); m != nil {
		at, err := time.Parse(hclog.TimeFormat, string(m[1]))
		d, derr := time.ParseDuration(string(m[4]))
		q, qerr := time.ParseDuration(string(m[5]))
		if err == nil && derr == nil && qerr == nil {
			// The log's times are whole milliseconds, cut: on average the
			// line was written half a millisecond later than it says.
			l.requests[string(m[3])+" "+string(m[2])] = daemonRequest{at: at.Add(500 * time.Microsecond), duration: d, queued: q}
			select {
			case l.seen <- struct{}{}:
			default:
			}
		}
		return
	}
	if m := allocField.FindSubmatch(p); m != nil {
		ph := l.phases[string(m[1])]
		if ph == nil {
			ph = &cyclePhases{}
			l.phases[string(m[1])] = ph
		}
		ph.addLine(p)
	}
}

// requestsOf waits, up to timeout, for the request lines of id's ADD and
// DEL and their steps lines (written after the answer), and returns and
// forgets them (phasesOf has id's phases: they were logged before the
// DEL's request line).
func (l *thickLog) requestsOf(id string, timeout time.Duration) (add, del daemonRequest, err error) {
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		add, okAdd := l.requests[id+" ADD"]
		del, okDel := l.requests[id+" DEL"]
		addSteps, okAddSteps := l.steps[id+" ADD"]
		delSteps, okDelSteps := l.steps[id+" DEL"]
		if okAdd && okDel && okAddSteps && okDelSteps {
			for _, key := range []string{id + " ADD", id + " DEL"} {
				delete(l.requests, key)
				delete(l.steps, key)
			}
			l.mu.Unlock()
			add.steps, del.steps = addSteps, delSteps
			return add, del, nil
		}
		l.mu.Unlock()
		select {
		case <-l.seen:
		case <-deadline:
			return add, del, fmt.Errorf("the daemon logged no request and steps lines for the ADD and the DEL of %s within %s", id, timeout)
		}
	}
}

// phasesOf returns and forgets cninet's phases of id.
func (l *thickLog) phasesOf(id string) cyclePhases {
	l.mu.Lock()
	defer l.mu.Unlock()
	ph := l.phases[id]
	delete(l.phases, id)
	if ph == nil {
		return cyclePhases{}
	}
	return *ph
}

// forget drops what was read so far (a burst's lines, a warm-up's).
func (l *thickLog) forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.requests)
	clear(l.steps)
	clear(l.phases)
}
