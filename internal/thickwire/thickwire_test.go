package thickwire

import (
	"strings"
	"testing"
	"time"
)

func TestShimLimits(t *testing.T) {
	cases := []struct {
		name, timeout, command string
		want                   Limits
	}{
		{"ADD waits as long as the daemon's default deadline", "", CmdAdd, Limits{Silence: SilenceLimit, Timeout: DefaultTimeout}},
		{"DEL and GC likewise", "", CmdDel, Limits{Silence: SilenceLimit, Timeout: DefaultTimeout}},
		{"CHECK, asked periodically, waits less", "", CmdCheck, Limits{Silence: SilenceLimit, Timeout: DefaultProbeTimeout}},
		{"STATUS likewise", "", CmdStatus, Limits{Silence: SilenceLimit, Timeout: DefaultProbeTimeout}},
		{`"timeout" sets every command's`, "45s", CmdStatus, Limits{Silence: SilenceLimit, Timeout: 45 * time.Second}},
		{`a "timeout" below the silence limit is the silence limit too`, "200ms", CmdDel, Limits{Silence: 200 * time.Millisecond, Timeout: 200 * time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShimLimits(tc.command, tc.timeout)
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"30", "soon", "-1s", "0s"} {
		t.Run(`a "timeout" of `+bad+" is refused, naming the key and the value", func(t *testing.T) {
			_, err := ShimLimits(CmdAdd, bad)
			if err == nil || !strings.Contains(err.Error(), `"timeout"`) || !strings.Contains(err.Error(), `"`+bad+`"`) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// A request goes in the oldest protocol that has what its command
// needs, never in one newer than this build's or older than the one
// that sends the head first (2).
func TestProtocolFor(t *testing.T) {
	cases := []struct {
		command string
		want    int
	}{
		{CmdAdd, 3}, // the result in the config's CNI version
		{CmdDel, 2}, {CmdCheck, 2}, {CmdStatus, 2}, {CmdGC, 2},
	}
	for _, tc := range cases {
		t.Run(tc.command, func(t *testing.T) {
			if got := ProtocolFor(tc.command); got != tc.want || got > ProtocolVersion || got < OldestProtocol {
				t.Fatalf("ProtocolFor(%s) = %d, want %d (this build speaks %d to %d)", tc.command, got, tc.want, OldestProtocol, ProtocolVersion)
			}
		})
	}
}

func TestNames(t *testing.T) {
	cases := []struct {
		name       string
		s          string
		owner, cni bool
	}{
		{"an executable's name is both", "containerd", true, true},
		{"a dotted one too", "cri-o.v1_2", true, true},
		{"'+' may name an owner only", "c++", true, false},
		{"nothing is neither", "", false, false},
		{"a leading dot is neither", ".x", false, false},
		{"a slash is neither", "a/b", false, false},
		{"a space is neither", "a b", false, false},
		{"non-ASCII is neither", "é", false, false},
		{"65 bytes is too long for an owner", strings.Repeat("a", 65), false, true},
		{"64 bytes is not", strings.Repeat("a", 64), true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsOwnerName(tc.s); got != tc.owner {
				t.Errorf("IsOwnerName(%q) = %v, want %v", tc.s, got, tc.owner)
			}
			if got := IsCNIName(tc.s); got != tc.cni {
				t.Errorf("IsCNIName(%q) = %v, want %v", tc.s, got, tc.cni)
			}
		})
	}
}
