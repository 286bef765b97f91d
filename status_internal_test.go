package cninet

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestStatusNamesEveryNetworkThatIsNotReady(t *testing.T) {
	cases := []struct {
		name     string
		plugins  []string
		notReady []string // networks the error must name
	}{
		{"every plugin present", []string{"loopback", "bridge", "firewall", "portmap", "ptp"}, nil},
		{"ptp missing: network c", []string{"loopback", "bridge", "firewall", "portmap"}, []string{`network "c"`}},
		{"portmap missing: networks a and b", []string{"loopback", "bridge", "firewall", "ptp"}, []string{`network "a"`, `network "b"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry, acceptAllPlugins(t, tc.plugins...))
			err := f.c.Status(context.Background())
			if len(tc.notReady) == 0 {
				if err != nil {
					t.Fatalf("Status = %v, want ready", err)
				}
				return
			}
			if !errors.Is(err, ErrNotReady) || !errors.Is(err, ErrPluginMissing) {
				t.Fatalf("Status = %v, want ErrNotReady and ErrPluginMissing", err)
			}
			for _, n := range tc.notReady {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("Status does not name %s: %v", n, err)
				}
			}
			if strings.Count(err.Error(), "network \"") != len(tc.notReady) {
				t.Errorf("Status names ready networks too: %v", err)
			}
		})
	}
}
