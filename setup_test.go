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
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

func TestEveryCleanupOfSetupIsBoundedByADeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"the caller's deadline bounds the DEL between attempts, the rollback's own bounds the rollback",
			func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), time.Hour)
			}},
		{"without a caller's deadline the rollback still has one",
			func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipt := &lockingIPTables{IPTables: fakes.NewIPTables()}
			errPlugin := errors.New("plugin said no")
			c := newLockingConfigurator(t, ipt, &fakes.CNI{SetupErrs: []error{errPlugin, errPlugin, errPlugin}})
			ctx, cancel := tc.ctx()
			defer cancel()
			if _, err := c.Setup(ctx, &cninet.Allocation{ID: "failing-1"}, "/x"); !errors.Is(err, cninet.ErrSetupFailed) {
				t.Fatalf("Setup = %v, want ErrSetupFailed", err)
			}
			bound := ipt.contexts()
			// two families, for the guard before and the cleanup after each
			// of two DELs between three attempts and the rollback's
			if len(bound) != 2*2*3 {
				t.Fatalf("cleanup bound %d contexts to iptables, want 12", len(bound))
			}
			callers, _ := ctx.Deadline()
			for i, b := range bound {
				deadline, ok := b.Deadline()
				rollback := i >= 8
				switch {
				case rollback && (!ok || deadline.After(time.Now().Add(30*time.Second))):
					t.Errorf("the rollback's cleanup ran with deadline %v (%v), want its own, within 30s", deadline, ok)
				case !rollback && deadline != callers:
					t.Errorf("a cleanup between attempts ran with deadline %v, want the caller's %v", deadline, callers)
				}
			}
		})
	}
}

func TestSetupBehindAHeldXtablesLockSaysTheRollbackIsIncomplete(t *testing.T) {
	ipt := &lockingIPTables{IPTables: fakes.NewIPTables(), held: true}
	// The rollback tries again until its deadline while the lock is held:
	// a shorter one than its 30s keeps the test quick.
	defer func(d time.Duration) { *cninet.RollbackTimeout = d }(*cninet.RollbackTimeout)
	*cninet.RollbackTimeout = 300 * time.Millisecond
	c := newLockingConfigurator(t, ipt, &fakes.CNI{SetupHook: func(ctx context.Context, _ string) error {
		<-ctx.Done() // a plugin waiting for the lock until it is killed
		return ctx.Err()
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Setup(ctx, &cninet.Allocation{ID: "locked-2"}, "/x")
	for _, want := range []error{cninet.ErrSetupFailed, cninet.ErrCleanupFailed, cninet.ErrXtablesLock} {
		if !errors.Is(err, want) {
			t.Errorf("err = %v, want it to wrap %v", err, want)
		}
	}
}

func TestSetupLoadsTheConflistOnFirstUseOnly(t *testing.T) {
	f := newFixture(t, &fakes.CNI{}, fastRetry)
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
	f := newFixture(t, &fakes.CNI{}, fastRetry)
	st, err := f.c.Setup(context.Background(), webAlloc(), "/var/run/netns/w")
	if err != nil {
		t.Fatal(err)
	}
	if st.Address.String() != "198.18.0.2" || st.IfName != "eth0" {
		t.Fatalf("status = %+v", st)
	}
	if err := f.c.Teardown(context.Background(), webAlloc(), "/var/run/netns/w"); err != nil {
		t.Fatal(err)
	}
	var setup, remove *fakes.Call
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
	for _, c := range []*fakes.Call{setup, remove} {
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
			f := newFixture(t, &fakes.CNI{SetupErrs: tc.errs}, fastRetry)
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

// attachVerbs drops the Status/Load bookkeeping from the recorded calls.
func attachVerbs(f *fakes.CNI) string {
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
	f := newFixture(t, &fakes.CNI{SetupErrs: []error{errors.New("transient")}}, slow)
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
	fake := &fakes.CNI{Result: &cni.Result{Interfaces: map[string]*cni.Config{"eth0": {Sandbox: "x"}}}}
	f := newFixture(t, fake, fastRetry)
	_, err := f.c.Setup(context.Background(), webAlloc(), "/var/run/netns/w")
	if !errors.Is(err, cninet.ErrNoAddress) {
		t.Fatalf("err = %v, want ErrNoAddress", err)
	}
	if got := attachVerbs(f.cni); got != "Setup Remove" {
		t.Fatalf("calls = %q, want the rollback DEL", got)
	}
}
