package main

import (
	"testing"
	"time"
)

// The cri scenario reads the daemon's debug log per crictl command: each
// request's duration, counted, and cninet's phases inside it, whatever
// the chunks the log arrives in; a failed request is not a served one.
func TestCRILogReadsEachRequestAndItsPhasesAcrossSplitWrites(t *testing.T) {
	log := `2026-11-27T19:51:11.100Z [DEBUG] cninet-daemon.cninet: network detached: alloc_id=a network=bench1 prevent="500µs" del=261ms cleanup="710µs" record="90µs"
2026-11-27T19:51:11.101Z [INFO]  cninet-daemon: request: command=DEL container_id=a netns=/var/run/netns/cni-1 ifname=eth0 network=bench1 owner=containerd duration=263.5ms code=0
2026-11-27T19:51:11.102Z [WARN]  cninet-daemon: request failed: command=DEL container_id=b duration=1ms code=11 error="try again"
2026-11-27T19:51:11.103Z [INFO]  cninet-daemon: request: command=DEL container_id=a netns=/var/run/netns/cni-1 ifname=eth0 network=bench1 owner=containerd duration="900µs" code=0
`
	l := &criLog{}
	for len(log) > 0 { // 37-byte chunks split lines anywhere
		n := min(37, len(log))
		l.Write([]byte(log[:n]))
		log = log[n:]
	}
	got := l.take()
	if got.count != 2 || got.requests != 263500*time.Microsecond+900*time.Microsecond {
		t.Errorf("read %d requests taking %s, want 2 taking 264.4ms (the failed one not counted)", got.count, got.requests)
	}
	if got.phases.Del != 261*time.Millisecond || got.phases.Prevent != 500*time.Microsecond || got.phases.Cleanup != 710*time.Microsecond {
		t.Errorf("read phases del %s, prevent %s, cleanup %s; want 261ms, 500µs, 710µs", got.phases.Del, got.phases.Prevent, got.phases.Cleanup)
	}
	if again := l.take(); again.count != 0 || again.requests != 0 || again.phases.Del != 0 {
		t.Errorf("a second take read %+v, want nothing: take starts a new window", again)
	}
}
