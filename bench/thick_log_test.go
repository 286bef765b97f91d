package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// The daemon's stderr arrives through a pipe in pieces that cut lines
// anywhere: each request line and each phase is read whole, by container
// id, and the line's millisecond time is taken half a millisecond on.
func TestThickLogReadsTheDaemonsLinesWholeByContainerID(t *testing.T) {
	l := newThickLog()
	log := `2026-11-27T19:30:00.100Z [DEBUG] cninet-daemon.cninet: attachment recorded: alloc_id=cnitool-a network=bench1 record=1ms
2026-11-27T19:30:00.120Z [DEBUG] cninet-daemon.cninet: network attached: alloc_id=cnitool-a network=bench1 attempt=1 duration=90ms
2026-11-27T19:30:00.123Z [INFO]  cninet-daemon: request: command=ADD container_id=cnitool-a netns=/run/netns/w ifname=eth0 network=bench1 owner=cnitool duration=95.5ms queued="12µs" code=0
2026-11-27T19:30:00.124Z [DEBUG] cninet-daemon: request steps: command=ADD container_id=cnitool-a accepted=1796398200028000000 head=1796398200028100000 acknowledged=1796398200028200000 slot=1796398200028300000 body=1796398200028400000 ran=1796398200123000000 answered=1796398200123400000
2026-11-27T19:30:00.200Z [DEBUG] cninet-daemon.cninet: network detached: alloc_id=cnitool-b network=bench1 prevent=1ms del=150ms cleanup=2ms record="300µs"
2026-11-27T19:30:00.400Z [DEBUG] cninet-daemon.cninet: network detached: alloc_id=cnitool-a network=bench1 prevent="1.5ms" del=200ms cleanup=1ms record="400µs"
2026-11-27T19:30:00.401Z [DEBUG] cninet-daemon.cninet: attachment forgotten: alloc_id=cnitool-a network=bench1 record="500µs"
2026-11-27T19:30:00.402Z [INFO]  cninet-daemon: request: command=DEL container_id=cnitool-a netns=/run/netns/w ifname=eth0 network=bench1 owner=cnitool duration=210ms queued=3ms code=0
2026-11-27T19:30:00.403Z [DEBUG] cninet-daemon: request steps: command=DEL container_id=cnitool-a head=1796398200192000000 ran=1796398200402000000
`
	for len(log) > 0 { // pieces of 37 bytes: no line arrives whole
		n := min(37, len(log))
		l.Write([]byte(log[:n]))
		log = log[n:]
	}
	add, del, err := l.requestsOf("cnitool-a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 27, 19, 30, 0, 123500000, time.UTC)
	if !add.at.Equal(at) || add.duration != 95500*time.Microsecond || add.queued != 12*time.Microsecond {
		t.Errorf("ADD read as %+v, want at %s, duration 95.5ms, queued 12µs", add, at)
	}
	if want := at.Add(-95500 * time.Microsecond); !add.start().Equal(want) {
		t.Errorf("ADD started %s, want %s", add.start(), want)
	}
	if del.duration != 210*time.Millisecond || del.queued != 3*time.Millisecond {
		t.Errorf("DEL read as %+v, want duration 210ms, queued 3ms", del)
	}
	if got := add.steps["answered"]; !got.Equal(time.Unix(0, 1796398200123400000)) || len(add.steps) != 7 {
		t.Errorf("ADD's steps %v, want 7 with answered at ...123400000", add.steps)
	}
	if len(del.steps) != 2 || del.steps["ran"].IsZero() {
		t.Errorf("DEL's steps %v, want head and ran", del.steps)
	}
	want := cyclePhases{Registry: registryTime{Setup: time.Millisecond, Proof: 400 * time.Microsecond, Removal: 500 * time.Microsecond},
		Add: 90 * time.Millisecond, Prevent: 1500 * time.Microsecond, Del: 200 * time.Millisecond, Cleanup: time.Millisecond}
	if got := l.phasesOf("cnitool-a"); got != want {
		t.Errorf("phases of cnitool-a\n%+v, want\n%+v", got, want)
	}
	if _, _, err := l.requestsOf("cnitool-a", 10*time.Millisecond); err == nil {
		t.Error("the requests of cnitool-a were read twice")
	}
	if _, _, err := l.requestsOf("cnitool-b", 10*time.Millisecond); err == nil {
		t.Error("cnitool-b logged no request line, yet its requests were found")
	}
}

// A command through the shim is taken apart at every moment of both
// sides: its parts add up to the whole command, with nothing left over.
func TestAHandoffsPartsAddUpToTheCommand(t *testing.T) {
	base := time.Unix(1796398200, 0)
	at := func(ms float64) time.Time { return base.Add(time.Duration(ms * float64(time.Millisecond))) }
	shim := moments{"main": at(2), "dialed": at(2.3), "sent": at(2.4), "acknowledged": at(2.9), "answered": at(100.5), "read": at(100.6), "exit": at(100.8)}
	daemon := moments{"accepted": at(2.35), "head": at(2.6), "acknowledged": at(2.7), "slot": at(2.75), "body": at(3), "delegated": at(3.2),
		"operated": at(99.2), "ran": at(100), "answered": at(100.2)}
	h := handoffOf(at(0), at(102), shim, daemon)
	var sum time.Duration
	for _, d := range h.Parts {
		sum += d
	}
	if !h.Complete || len(h.Parts) != len(handoffParts) || sum != 102*time.Millisecond {
		t.Fatalf("parts %v (complete %v) add up to %s, want the whole 102ms", h.Parts, h.Complete, sum)
	}
	if h.Parts[0] != 2*time.Millisecond || h.Parts[8] != 96*time.Millisecond || h.AckWay != 200*time.Microsecond {
		t.Errorf("parts %v, ack's way %s: want 2ms to main, 96ms of cninet's operation, 0.2ms for the acknowledgement", h.Parts, h.AckWay)
	}
	delete(shim, "read")
	if handoffOf(at(0), at(102), shim, daemon).Complete {
		t.Error("a command without the shim's read moment is complete")
	}
}

// The shims' lines are read by id and command, from where the last read
// stopped.
func TestShimTimesAreReadByIDAndCommand(t *testing.T) {
	file := t.TempDir() + "/times"
	write := func(s string) {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	write("cninet-shim ADD c1 eth0 code=0 main=1796398200000000000 exit=1796398200100000000\n")
	got, offset, err := shimTimes(file, 0)
	if err != nil || len(got) != 1 || got["c1 ADD"]["exit"].Sub(got["c1 ADD"]["main"]) != 100*time.Millisecond {
		t.Fatalf("read %v, %v", got, err)
	}
	write("cninet-shim DEL c1 eth0 code=1 main=1796398201000000000\n")
	got, _, err = shimTimes(file, offset)
	if err != nil || len(got) != 1 || got["c1 DEL"] == nil {
		t.Fatalf("read on %v, %v; want the DEL alone", got, err)
	}
}

// What the thick path's parts leave of the shim's cycle over the
// delegate's is judged with the paired mean's noise: within 0.5 ms even
// two standard errors up is met, over it even two down missed, else not
// measurable.
func TestTheUnexplainedRemainderIsJudgedAtItsNoise(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * 1e6) }
	for _, tc := range []struct {
		name string
		r    remainder
		want string
	}{
		{"none left, told: met", remainder{Rem: ms(0.1), SE: ms(0.1)}, "met"},
		{"3 ms left, told: missed", remainder{Rem: ms(3), SE: ms(0.5)}, "**missed**"},
		{"2 ms left at ±3.8 ms: not measurable", remainder{Rem: ms(2), SE: ms(1.9)}, "not measurable at ±3.8 ms"},
		{"none left at ±3.8 ms: not measurable", remainder{Rem: 0, SE: ms(1.9)}, "not measurable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.verdict(unexplainedTarget); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("%v: verdict %q, want %q", tc.r, got, tc.want)
			}
		})
	}
}
