package cninet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/fakecni"
	"github.com/seed1280861d/cninet/internal/fakeipt"
)

// lockingIPTables is fake iptables that can be bound to a context, as the
// host's can, and stands in for another process holding the xtables lock:
// while held, every command of a bound copy fails as the host's does,
// either at once (iptables' own wait ran out) or, with block, when its
// context ends. It records every context it is bound to.
type lockingIPTables struct {
	*fakeipt.IPTables
	held  bool
	block bool
	mu    sync.Mutex
	bound []context.Context
}

func (l *lockingIPTables) WithContext(ctx context.Context) cninet.IPTables {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bound = append(l.bound, ctx)
	return boundIPTables{l, ctx}
}

func (l *lockingIPTables) contexts() []context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]context.Context(nil), l.bound...)
}

type boundIPTables struct {
	l   *lockingIPTables
	ctx context.Context
}

func (b boundIPTables) wait(what string) error {
	if !b.l.held {
		return nil
	}
	if !b.l.block {
		return fmt.Errorf("%s: %w: /run/xtables.lock held by pid 4242, waited 1s", what, cninet.ErrXtablesLock)
	}
	<-b.ctx.Done()
	return fmt.Errorf("%s: stopped: %w; %w: /run/xtables.lock is held by pid 4242", what, b.ctx.Err(), cninet.ErrXtablesLock)
}

func (b boundIPTables) List(table, chain string) ([]string, error) {
	if err := b.wait("iptables -t " + table + " -S " + chain); err != nil {
		return nil, err
	}
	return b.l.List(table, chain)
}

func (b boundIPTables) Delete(table, chain string, spec ...string) error {
	if err := b.wait("iptables -t " + table + " -D " + chain); err != nil {
		return err
	}
	return b.l.Delete(table, chain, spec...)
}

func (b boundIPTables) ClearAndDeleteChain(table, chain string) error {
	if err := b.wait("iptables -t " + table + " -X " + chain); err != nil {
		return err
	}
	return b.l.ClearAndDeleteChain(table, chain)
}

func newLockingConfigurator(t *testing.T, ipt *lockingIPTables, fake *fakecni.CNI) *cninet.Configurator {
	t.Helper()
	c, err := cninet.New(cninet.Config{ConfList: unitConfList(t), CNI: fake, CacheDir: t.TempDir(), NFTables: noNFTables,
		Retry: fastRetry, IPTables: func(bool) (cninet.IPTables, error) { return ipt, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTeardownBehindAHeldXtablesLockEndsWithItsContext(t *testing.T) {
	ipt := &lockingIPTables{IPTables: fakeipt.New(), held: true, block: true}
	c := newLockingConfigurator(t, ipt, &fakecni.CNI{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Teardown(ctx, &cninet.Allocation{ID: "locked-1"}, "") }()
	select {
	case err := <-done:
		for _, want := range []error{cninet.ErrCleanupFailed, cninet.ErrXtablesLock, context.DeadlineExceeded} {
			if !errors.Is(err, want) {
				t.Errorf("err = %v, want it to wrap %v", err, want)
			}
		}
	case <-time.After(time.Minute):
		t.Fatal("Teardown still running a minute after its 100ms deadline")
	}
}

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
			ipt := &lockingIPTables{IPTables: fakeipt.New()}
			errPlugin := errors.New("plugin said no")
			c := newLockingConfigurator(t, ipt, &fakecni.CNI{SetupErrs: []error{errPlugin, errPlugin, errPlugin}})
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
	ipt := &lockingIPTables{IPTables: fakeipt.New(), held: true}
	c := newLockingConfigurator(t, ipt, &fakecni.CNI{SetupHook: func(ctx context.Context, _ string) error {
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
