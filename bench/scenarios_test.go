package main

import "testing"

func TestDetachedLineFieldsAreReadQuotedOrNot(t *testing.T) {
	for _, line := range []string{
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n prevent="207.3µs" del=203.5ms cleanup="812µs"`,
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n prevent=1.2ms del=203.5ms cleanup=1.4ms`,
	} {
		l := &cleanupLog{}
		l.Write([]byte(line))
		cleanup, prevent, _ := l.take()
		if len(cleanup) != 1 || len(prevent) != 1 || cleanup[0] <= 0 || prevent[0] <= 0 {
			t.Errorf("%s: read cleanup %v, prevent %v; want one positive duration each", line, cleanup, prevent)
		}
	}
}
