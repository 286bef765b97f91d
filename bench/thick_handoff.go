package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// A command through the shim, taken apart at every step on both sides:
// the bench's clock at cnitool's start and exit, the shim's moments
// (CNINET_SHIM_TIMES: one line per command) and the daemon's (its
// "request steps" debug line), all Unix nanoseconds of the one host
// clock. Each part runs from one moment to the next, so the parts add
// up to the whole command: nothing is "the rest".

// handoffPart is one part of a command through the shim: from one
// moment to the next.
type handoffPart struct {
	from, to string // "bench:start", "shim:main", "daemon:head", …
	what     string // what happens in between
	// thickOnly: the part exists only on the thick path (cnitool on the
	// delegate directly has none of it).
	thickOnly bool
}

// handoffParts are the parts of one command, in order; the run is taken
// apart further by cninet's phases.
var handoffParts = []handoffPart{
	{"bench:start", "shim:main", "cnitool's start and conflist, the shim's exec and the Go runtime's start", false},
	{"shim:main", "shim:dialed", "the shim: its config read, the request built, the socket connected", true},
	{"shim:dialed", "shim:sent", "the shim writes the request (head and body)", true},
	{"shim:sent", "daemon:head", "the daemon: the connection accepted, net/http's goroutine, the head read", true},
	{"daemon:head", "daemon:acknowledged", "the daemon: the head checked, the acknowledgement written", true},
	{"daemon:acknowledged", "daemon:slot", "the daemon: waiting for a slot", true},
	{"daemon:slot", "daemon:body", "the daemon: the body read and decoded", true},
	{"daemon:body", "daemon:delegated", "the daemon: the network known, the container's lock, its delegate id (its records and libcni's cache read)", true},
	{"daemon:delegated", "daemon:operated", "cninet's Connect or Disconnect", false},
	{"daemon:operated", "daemon:ran", "the daemon: ADD's cached result read again and converted to the config's CNI version", true},
	{"daemon:ran", "daemon:answered", "the daemon: the answer encoded, the request logged, the answer written", true},
	{"daemon:answered", "shim:answered", "the answer's way to the shim and its wake-up", true},
	{"shim:answered", "shim:read", "the shim reads the answer's body", true},
	{"shim:read", "shim:exit", "the shim prints the result", true},
	{"shim:exit", "bench:end", "the shim's exit, cnitool's result, cache and exit", false},
}

// handoff is one command's parts (handoffParts, in order), and the
// acknowledgement's way to the shim, which runs beside them.
type handoff struct {
	Parts []time.Duration
	// AckWay is from the daemon's acknowledgement to the shim's reading
	// it (0 when there was none).
	AckWay time.Duration
	// Complete: every moment was found.
	Complete bool
}

// handoffOf takes one command apart from its moments: the bench's start
// and end, the shim's and the daemon's, each by name without its side.
func handoffOf(start, end time.Time, shim, daemon moments) handoff {
	at := func(name string) (time.Time, bool) {
		side, step, _ := strings.Cut(name, ":")
		switch side {
		case "bench":
			if step == "start" {
				return start, true
			}
			return end, true
		case "shim":
			t, ok := shim[step]
			return t, ok
		}
		t, ok := daemon[step]
		return t, ok
	}
	h := handoff{Complete: true}
	for _, p := range handoffParts {
		from, ok1 := at(p.from)
		to, ok2 := at(p.to)
		if !ok1 || !ok2 {
			h.Complete = false
			h.Parts = append(h.Parts, 0)
			continue
		}
		h.Parts = append(h.Parts, to.Sub(from))
	}
	if sent, ok := daemon["acknowledged"]; ok {
		if got, ok := shim["acknowledged"]; ok {
			h.AckWay = got.Sub(sent)
		}
	}
	return h
}

// moments are the named moments of one side of a command.
type moments map[string]time.Time

// readMoments reads "name=unixnano" fields.
func readMoments(fields []string) moments {
	m := moments{}
	for _, f := range fields {
		name, value, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if ns, err := strconv.ParseInt(value, 10, 64); err == nil && ns > 1e18 {
			m[name] = time.Unix(0, ns)
		}
	}
	return m
}

// shimTimes reads the lines the shims appended to file since offset:
// "cninet-shim COMMAND ID IFNAME code=N main=… … exit=…", by "ID
// COMMAND"; and the offset after them.
func shimTimes(file string, offset int64) (map[string]moments, int64, error) {
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return map[string]moments{}, offset, nil
	}
	if err != nil {
		return nil, offset, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return nil, offset, err
	}
	out := map[string]moments{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		offset += int64(len(line)) + 1
		f := strings.Fields(string(line))
		if len(f) < 5 || f[0] != "cninet-shim" {
			continue
		}
		out[f[2]+" "+f[1]] = readMoments(f[4:])
	}
	return out, offset, sc.Err()
}

// stepsLine is the daemon's "request steps" debug line
// (thick.Server.logSteps).
var stepsLine = []byte("cninet-daemon: request steps:")

// daemonSteps reads the daemon's steps of one request from its line: the
// command and container id, and the moments.
func daemonSteps(line []byte) (key string, m moments, ok bool) {
	i := bytes.Index(line, stepsLine)
	if i < 0 {
		return "", nil, false
	}
	fields := strings.Fields(string(line[i+len(stepsLine):]))
	var command, id string
	for _, f := range fields {
		if v, ok := strings.CutPrefix(f, "command="); ok {
			command = v
		}
		if v, ok := strings.CutPrefix(f, "container_id="); ok {
			id = v
		}
	}
	return id + " " + command, readMoments(fields), command != "" && id != ""
}

// handoffTable reports the parts of the shim's cycles (ADD and DEL
// summed, medians over the cycles), the run taken apart by cninet's
// phases, and what of it the thick path adds, which it returns (ok false
// when no cycle was taken apart whole).
func (r *report) handoffTable(w writer, t *thickResult) (added time.Duration, ok bool) {
	var cycles []thickSplit
	for _, c := range t.Split {
		if c.AddHandoff.Complete && c.DelHandoff.Complete {
			cycles = append(cycles, c)
		}
	}
	if len(cycles) == 0 {
		return 0, false
	}
	part := func(f func(thickSplit) time.Duration) time.Duration {
		var s sample
		for _, c := range cycles {
			s = append(s, f(c))
		}
		return s.median()
	}
	sum := func(i int) func(thickSplit) time.Duration {
		return func(c thickSplit) time.Duration { return c.AddHandoff.Parts[i] + c.DelHandoff.Parts[i] }
	}
	whole := part(func(c thickSplit) time.Duration { return c.Add + c.Del })
	w("Each command through the shim, taken apart at every step on both sides (%d cycles, ADD and DEL summed, medians): the bench's clock at cnitool's start and exit, the shim's moments (`%s`: main, dialed, sent, acknowledged, answered, read, exit) and the daemon's (its `request steps` debug line: head, acknowledged, slot, body, delegated, operated, ran, answered; cninet's debug lines take the operation apart), all in nanoseconds of the one host clock. Each part runs from one moment to the next, so the parts add up to the cycle (the medians of the parts need not add up to the median cycle exactly).\n\n",
		len(cycles), "CNINET_SHIM_TIMES")
	w("| part of the shim's cycle | thick path only | median | share |\n|---|---|---|---|\n")
	row := func(name, only string, d time.Duration) {
		w("| %s | %s | %s | %.1f%% |\n", name, only, msFine(d), 100*float64(d)/float64(whole))
	}
	row("cnitool ADD+DEL through the shim (whole cycle)", "", whole)
	var thickOnly time.Duration
	for i, p := range handoffParts {
		d := part(sum(i))
		only := ""
		if p.thickOnly {
			only, thickOnly = "yes", thickOnly+d
		}
		row(p.what, only, d)
		if p.to == "daemon:operated" {
			ph := func(f func(cyclePhases) time.Duration) time.Duration {
				return part(func(c thickSplit) time.Duration { return f(c.Phases) })
			}
			row("  of it: the plugins (libcni running the delegate chain)", "", part(thickSplit.plugins))
			row("  of it: the host registry (record before and after the ADD, removal after the DEL)", "yes", ph(func(p cyclePhases) time.Duration { return p.Registry.Setup + p.Registry.Removal }))
			row("  of it: the prevention before the DEL", "yes", ph(func(p cyclePhases) time.Duration { return p.Prevent }))
			row("  of it: the force cleanup after the DEL", "yes", ph(func(p cyclePhases) time.Duration { return p.Cleanup }))
			row("  of it: the allocation's lock and finding its attachment", "yes", ph(func(p cyclePhases) time.Duration {
				return p.SetupLock + p.SetupFind + p.TeardownLock + p.TeardownFind
			}))
			row("  of it: the workload's lo looked at before and after (the chain has the loopback plugin)", "yes", ph(func(p cyclePhases) time.Duration { return p.Loopback }))
			rest := part(func(c thickSplit) time.Duration {
				return c.AddHandoff.Parts[i] + c.DelHandoff.Parts[i] - c.plugins() - c.cninetOwn() - c.Phases.Loopback
			})
			row("  of it: the rest of the operation (its checks, its telemetry, between the timed phases)", "yes", rest)
			thickOnly += part(thickSplit.cninetOwn) + ph(func(p cyclePhases) time.Duration { return p.Loopback }) + rest
		}
	}
	ack := part(func(c thickSplit) time.Duration { return c.AddHandoff.AckWay + c.DelHandoff.AckWay })
	w("\nBeside these: the acknowledgement's way from the daemon to the shim, %s (the shim wakes up for it while the daemon works). The shim's own exec, start and exit, within the first and the last part, are its start-up below (%s a command%s).\n\n",
		msFine(ack), msFine(t.ShimStart.median()), emptyBeside(t))
	added = thickOnly + 2*t.ShimStart.median()
	rem := unexplained(t, added)
	w("What the thick path adds, part by part (the parts marked above and the shim's start-up twice): **%s** a cycle; the cycle through the shim less cnitool's on the delegate directly is %s (paired mean %s), which also holds the plugins' own variation between the two. Not explained by the parts: the paired mean less them, %s (two standard errors of the paired mean either side).\n\n",
		msFine(added), ms(t.Shim.median()-t.Direct.median()), pairedString(t.Shim, t.Direct), rem)
	return added, true
}

// unexplainedTarget is the most of the shim's cycle over the delegate's
// that the thick path's parts may leave unexplained (issue 41).
const unexplainedTarget = 500 * time.Microsecond

// remainder is the paired mean of shim − direct less what the parts
// explain, with the paired mean's standard error.
type remainder struct {
	Rem, SE time.Duration
}

func unexplained(t *thickResult, added time.Duration) remainder {
	mean, se, _ := pairedDiff(t.Shim, t.Direct)
	return remainder{Rem: mean - added, SE: se}
}

func (r remainder) String() string {
	return fmt.Sprintf("%+.1f ms, from %+.1f to %+.1f ms", float64(r.Rem)/1e6, float64(r.Rem-2*r.SE)/1e6, float64(r.Rem+2*r.SE)/1e6)
}

// verdict is met when the remainder is at most target even two standard
// errors up, missed when it is more even two down, else not measurable.
func (r remainder) verdict(target time.Duration) string {
	switch {
	case r.Rem+2*r.SE <= target:
		return "met"
	case r.Rem-2*r.SE > target:
		return verdict(false)
	}
	return fmt.Sprintf("not measurable at ±%.1f ms", 2*float64(r.SE)/1e6)
}

// emptyBeside is ", an empty Go program's X" where the run measured one.
func emptyBeside(t *thickResult) string {
	if len(t.EmptyStart) == 0 {
		return ""
	}
	return fmt.Sprintf("; an empty Go program, started the same way and interleaved with it, %s", msFine(t.EmptyStart.median()))
}
