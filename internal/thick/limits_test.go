package thick

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestShimLimits(t *testing.T) {
	cases := []struct {
		name, timeout, command string
		want                   Limits
	}{
		{"ADD waits as long as the daemon's default deadline", "", CmdAdd, Limits{SilenceLimit, DefaultTimeout}},
		{"DEL and GC likewise", "", CmdDel, Limits{SilenceLimit, DefaultTimeout}},
		{"CHECK, asked periodically, waits less", "", CmdCheck, Limits{SilenceLimit, DefaultProbeTimeout}},
		{"STATUS likewise", "", CmdStatus, Limits{SilenceLimit, DefaultProbeTimeout}},
		{`"timeout" sets every command's`, "45s", CmdStatus, Limits{SilenceLimit, 45 * time.Second}},
		{`a "timeout" below the silence limit is the silence limit too`, "200ms", CmdDel, Limits{200 * time.Millisecond, 200 * time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShimLimits(&NetConf{Timeout: tc.timeout}, tc.command)
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"30", "soon", "-1s", "0s"} {
		t.Run(`a "timeout" of `+bad+" is refused, naming the key", func(t *testing.T) {
			_, err := ShimLimits(&NetConf{Timeout: bad}, CmdAdd)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `"timeout"`) || !strings.Contains(err.Error(), bad) {
				t.Fatalf("got %v", err)
			}
		})
	}
}
