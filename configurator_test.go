package cninet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// unitConfList is the default bridge conflist under a network name no host
// uses, with reservations in a temporary directory.
// noNFTables is an empty in-memory nftables: unit tests never read the
// host's.
func noNFTables() (host.NFTables, error) { return &fakes.NFTables{}, nil }

func unitConfList(t *testing.T) []byte {
	t.Helper()
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName = "cninet-unit"
	cfg.IPv4Subnet = "198.18.0.0/24"
	cfg.IPAMDataDir = t.TempDir()
	b, err := cninet.BridgeConfList(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fixture struct {
	c      *cninet.Configurator
	cni    *fakes.CNI
	v4, v6 *fakes.IPTables
}

func newFixture(t *testing.T, fake *fakes.CNI, retry cninet.RetryPolicy) fixture {
	t.Helper()
	f := fixture{cni: fake, v4: fakes.NewIPTables(), v6: fakes.NewIPTables()}
	c, err := cninet.New(cninet.Config{
		CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables,
		ConfList: unitConfList(t),
		CNI:      fake,
		Retry:    retry,
		IPTables: func(v6 bool) (host.IPTables, error) {
			if v6 {
				return f.v6, nil
			}
			return f.v4, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	f.c = c
	return f
}

var fastRetry = cninet.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}

func webAlloc() *cninet.Allocation {
	return &cninet.Allocation{ID: "alloc-1", Ports: []cninet.Port{{Label: "http", Value: 8080, To: 80}},
		Args: map[string]string{"NOMAD_ALLOC_ID": "alloc-1"}}
}

func TestInvalidCallsChangeNothing(t *testing.T) {
	cases := []struct {
		name  string
		alloc *cninet.Allocation
		netns string
		want  error
	}{
		{"a nil allocation", nil, "/var/run/netns/w", cninet.ErrInvalidAllocation},
		{"an empty id", &cninet.Allocation{}, "/var/run/netns/w", cninet.ErrInvalidAllocation},
		{"an id that is not a CNI container id", &cninet.Allocation{ID: "a/../b"}, "/var/run/netns/w", cninet.ErrInvalidAllocation},
		{"an id starting with a dash", &cninet.Allocation{ID: "-a"}, "/var/run/netns/w", cninet.ErrInvalidAllocation},
		{"a port out of range", &cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 70000}}}, "/var/run/netns/w", cninet.ErrInvalidAllocation},
		{"an arg with ';'", &cninet.Allocation{ID: "a", Args: map[string]string{"K": "v;X=y"}}, "/var/run/netns/w", cninet.ErrInvalidAllocation},
		{"an empty netns path", &cninet.Allocation{ID: "a"}, "", cninet.ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakes.CNI{}, fastRetry)
			if _, err := f.c.Setup(context.Background(), tc.alloc, tc.netns); !errors.Is(err, tc.want) {
				t.Errorf("Setup err = %v, want %v", err, tc.want)
			}
			if err := f.c.Check(context.Background(), tc.alloc, tc.netns); !errors.Is(err, tc.want) {
				t.Errorf("Check err = %v, want %v", err, tc.want)
			}
			if tc.netns != "" {
				if err := f.c.Teardown(context.Background(), tc.alloc, tc.netns); !errors.Is(err, tc.want) {
					t.Errorf("Teardown err = %v, want %v", err, tc.want)
				}
			}
			if got := attachVerbs(f.cni); got != "" {
				t.Errorf("plugins were called: %q", got)
			}
			if calls := append(f.v4.Calls(), f.v6.Calls()...); len(calls) > 0 {
				t.Errorf("iptables was touched: %v", calls)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cases := map[string]cninet.Config{
		"no network at all":                          {},
		"a conflist that is not JSON":                {ConfList: []byte("{")},
		"a conflist without plugins":                 {ConfList: []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[]}`)},
		"a plugin without a type":                    {ConfList: []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"x":1}]}`)},
		"negative retry attempts":                    {ConfList: []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"}]}`), Retry: cninet.RetryPolicy{Attempts: -1}},
		"a NetworkName that disagrees with ConfList": {NetworkName: "other", ConfList: []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"}]}`)},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			cfg.CNI, cfg.CacheDir, cfg.NFTables = &fakes.CNI{}, t.TempDir(), noNFTables
			if _, err := cninet.New(cfg); !errors.Is(err, cninet.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}
