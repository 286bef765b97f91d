package main

import (
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
2026-11-27T19:30:00.200Z [DEBUG] cninet-daemon.cninet: network detached: alloc_id=cnitool-b network=bench1 prevent=1ms del=150ms cleanup=2ms record="300µs"
2026-11-27T19:30:00.400Z [DEBUG] cninet-daemon.cninet: network detached: alloc_id=cnitool-a network=bench1 prevent="1.5ms" del=200ms cleanup=1ms record="400µs"
2026-11-27T19:30:00.401Z [DEBUG] cninet-daemon.cninet: attachment forgotten: alloc_id=cnitool-a network=bench1 record="500µs"
2026-11-27T19:30:00.402Z [INFO]  cninet-daemon: request: command=DEL container_id=cnitool-a netns=/run/netns/w ifname=eth0 network=bench1 owner=cnitool duration=210ms queued=3ms code=0
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
