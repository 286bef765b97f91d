package cninet_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/fakecni"
	"github.com/seed1280861d/cninet/internal/fakeipt"
	"github.com/seed1280861d/cninet/internal/fakenft"
)

// unitConfList is the default bridge conflist under a network name no host
// uses, with reservations in a temporary directory.
// noNFTables is an empty in-memory nftables: unit tests never read the
// host's.
func noNFTables() (cninet.NFTables, error) { return &fakenft.NFTables{}, nil }

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
	cni    *fakecni.CNI
	v4, v6 *fakeipt.IPTables
}

func newFixture(t *testing.T, fake *fakecni.CNI, retry cninet.RetryPolicy) fixture {
	t.Helper()
	f := fixture{cni: fake, v4: fakeipt.New(), v6: fakeipt.New()}
	c, err := cninet.New(cninet.Config{
		CacheDir: t.TempDir(), NFTables: noNFTables,
		ConfList: unitConfList(t),
		CNI:      fake,
		Retry:    retry,
		IPTables: func(v6 bool) (cninet.IPTables, error) {
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

func TestSetupLoadsTheConflistOnFirstUseOnly(t *testing.T) {
	f := newFixture(t, &fakecni.CNI{}, fastRetry)
	for i := 0; i < 2; i++ {
		if _, err := f.c.Setup(context.Background(), webAlloc(), "/var/run/netns/w"); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(strings.Join(f.cni.Verbs(), " "), "Load"); n != 1 {
		t.Fatalf("Load called %d times (%v), want once", n, f.cni.Verbs())
	}
}

func TestSetupSendsPortMappingsAndArgsAndTeardownSendsTheSame(t *testing.T) {
	f := newFixture(t, &fakecni.CNI{}, fastRetry)
	st, err := f.c.Setup(context.Background(), webAlloc(), "/var/run/netns/w")
	if err != nil {
		t.Fatal(err)
	}
	if st.Address.String() != "198.18.0.2" || st.InterfaceName != "eth0" {
		t.Fatalf("status = %+v", st)
	}
	if err := f.c.Teardown(context.Background(), webAlloc(), "/var/run/netns/w"); err != nil {
		t.Fatal(err)
	}
	var setup, remove *fakecni.Call
	for _, c := range f.cni.Calls() {
		switch c := c; c.Verb {
		case "Setup":
			setup = &c
		case "Remove":
			remove = &c
		}
	}
	if setup == nil || remove == nil {
		t.Fatalf("calls = %v, want a Setup and a Remove", f.cni.Verbs())
	}
	wantPM := []cni.PortMapping{pm(8080, 80, "tcp", ""), pm(8080, 80, "udp", "")}
	wantArgs := map[string]string{"IgnoreUnknown": "1", "NOMAD_ALLOC_ID": "alloc-1"}
	for _, c := range []*fakecni.Call{setup, remove} {
		if c.ID != "alloc-1" || c.NetNS != "/var/run/netns/w" || !reflect.DeepEqual(c.PortMappings, wantPM) || !reflect.DeepEqual(c.Args, wantArgs) {
			t.Errorf("%s got id=%s netns=%s mappings=%+v args=%v", c.Verb, c.ID, c.NetNS, c.PortMappings, c.Args)
		}
	}
}

func TestSetupRetries(t *testing.T) {
	transient := errors.New("plugin bridge failed (add): failed to create bridge: file exists")
	permanent := &types.Error{Code: types.ErrInvalidNetworkConfig, Msg: "bad config"}
	cases := []struct {
		name      string
		errs      []error
		wantErr   bool
		wantVerbs string
		wantInErr []string
	}{
		{
			name:      "recovers on the second attempt with a DEL in between",
			errs:      []error{transient},
			wantVerbs: "Setup Remove Setup",
		},
		{
			name:      "gives up after the last attempt, names the first and last cause, and rolls back",
			errs:      []error{errors.New("first cause"), transient, errors.New("last cause")},
			wantErr:   true,
			wantVerbs: "Setup Remove Setup Remove Setup Remove",
			wantInErr: []string{"first cause", "last cause", "3 attempt"},
		},
		{
			name:      "a permanent error is not retried but still rolled back",
			errs:      []error{permanent},
			wantErr:   true,
			wantVerbs: "Setup Remove",
			wantInErr: []string{"bad config", "1 attempt"},
		},
		{
			name:      "a missing plugin is not retried",
			errs:      []error{errors.New(`failed to find plugin "bridge" in path [/opt/cni/bin]`)},
			wantErr:   true,
			wantVerbs: "Setup Remove",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakecni.CNI{SetupErrs: tc.errs}, fastRetry)
			_, err := f.c.Setup(context.Background(), webAlloc(), "/var/run/netns/w")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, cninet.ErrSetupFailed) {
				t.Errorf("err = %v, want ErrSetupFailed", err)
			}
			for _, s := range tc.wantInErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if got := attachVerbs(f.cni); got != tc.wantVerbs {
				t.Errorf("calls = %q, want %q", got, tc.wantVerbs)
			}
		})
	}
}

// attachVerbs drops the Status/Load bookkeeping from the recorded verbs.
func attachVerbs(f *fakecni.CNI) string {
	var v []string
	for _, s := range f.Verbs() {
		if s != "Status" && s != "Load" {
			v = append(v, s)
		}
	}
	return strings.Join(v, " ")
}

func TestSetupReturnsPromptlyWhenTheContextIsCancelledMidWaitAndRollsBack(t *testing.T) {
	slow := cninet.RetryPolicy{Attempts: 5, BaseDelay: time.Hour, MaxDelay: time.Hour}
	f := newFixture(t, &fakecni.CNI{SetupErrs: []error{errors.New("transient")}}, slow)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.c.Setup(ctx, webAlloc(), "/var/run/netns/w")
		done <- err
	}()
	for attachVerbs(f.cni) != "Setup Remove" {
		time.Sleep(time.Millisecond) // wait until Setup sits in its backoff
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cninet.ErrSetupFailed) {
			t.Fatalf("err = %v, want ErrSetupFailed and context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Setup still waiting an hour-long backoff after its context was cancelled")
	}
	if got := attachVerbs(f.cni); got != "Setup Remove Remove" {
		t.Fatalf("calls = %q, want the rollback DEL after the cancelled wait", got)
	}
}

func TestSetupWithoutAnAddressRollsBackAndFailsWithErrNoAddress(t *testing.T) {
	fake := &fakecni.CNI{Result: &cni.Result{Interfaces: map[string]*cni.Config{"eth0": {Sandbox: "x"}}}}
	f := newFixture(t, fake, fastRetry)
	_, err := f.c.Setup(context.Background(), webAlloc(), "/var/run/netns/w")
	if !errors.Is(err, cninet.ErrNoAddress) {
		t.Fatalf("err = %v, want ErrNoAddress", err)
	}
	if got := attachVerbs(f.cni); got != "Setup Remove" {
		t.Fatalf("calls = %q, want the rollback DEL", got)
	}
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
		{"an empty netns path", &cninet.Allocation{ID: "a"}, "", cninet.ErrInvalidNetNS},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, &fakecni.CNI{}, fastRetry)
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

func TestCheck(t *testing.T) {
	f := newFixture(t, &fakecni.CNI{}, fastRetry)
	if err := f.c.Check(context.Background(), webAlloc(), "/var/run/netns/w"); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	cause := errors.New("bridge: interface eth0 not found")
	f.cni.CheckErr = cause
	err := f.c.Check(context.Background(), webAlloc(), "/var/run/netns/w")
	if !errors.Is(err, cninet.ErrCheckFailed) || !errors.Is(err, cause) {
		t.Fatalf("err = %v, want ErrCheckFailed wrapping the cause", err)
	}
	last := f.cni.Calls()[len(f.cni.Calls())-1]
	if last.Verb != "Check" || len(last.PortMappings) != 2 || last.Args["IgnoreUnknown"] != "1" {
		t.Fatalf("Check sent %+v, want Setup's port mappings and args", last)
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
			cfg.CNI, cfg.CacheDir, cfg.NFTables = &fakecni.CNI{}, t.TempDir(), noNFTables
			if _, err := cninet.New(cfg); !errors.Is(err, cninet.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}
