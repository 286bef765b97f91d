package iptables

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/fakeipt"
)

func TestBoundHostIPTablesCommands(t *testing.T) {
	t.Setenv("XTABLES_LOCKFILE", "/run/test-xtables.lock")
	for _, tc := range []struct {
		name    string
		timeout time.Duration // 0: no deadline
		cancel  bool          // ctx ended before the call
		held    bool
		block   bool // the deadline comes before iptables gives up
		locking bool // the binary takes the lock (iptables-legacy)
		call    func(ipt host.IPTables) error
		want    []error // errors.Is
		says    []string
		ran     []string // command lines, exactly
	}{
		{
			name: "a listing waits for the lock until the deadline, in whole seconds", timeout: 7500 * time.Millisecond, locking: true,
			call: func(ipt host.IPTables) error { _, err := ipt.List("nat", "POSTROUTING"); return err },
			ran:  []string{"iptables -t nat -S POSTROUTING -w 7"},
		},
		{
			name: "without a deadline all waits together last DefaultLockWait", locking: true,
			call: func(ipt host.IPTables) error {
				return ipt.Delete("nat", "POSTROUTING", "-s", "198.18.0.2/32", "-j", "ACCEPT")
			},
			want: []error{fakeipt.ErrExit}, says: []string{"Bad rule"},
			ran: []string{"iptables -t nat -D POSTROUTING -s 198.18.0.2/32 -j ACCEPT -w 29"},
		},
		{
			name: "iptables giving up names the lock, the wait and the holder", timeout: 3 * time.Second, held: true, locking: true,
			call: func(ipt host.IPTables) error { _, err := ipt.List("nat", "POSTROUTING"); return err },
			want: []error{host.ErrXtablesLock}, says: []string{"/run/test-xtables.lock held by pid 4242", "waited", "Stopped waiting after 1s"},
			ran: []string{"iptables -t nat -S POSTROUTING -w 2"},
		},
		{
			name: "a batch refused for the lock is ErrXtablesLock", timeout: 3 * time.Second, held: true, locking: true,
			call: func(ipt host.IPTables) error {
				return ipt.(host.Restorer).RestoreNoFlush("nat", []string{"-F CNI-X", "-X CNI-X"})
			},
			want: []error{host.ErrXtablesLock}, says: []string{"iptables-restore --noflush -w 2"},
			ran: []string{"iptables-restore --noflush -w 2"},
		},
		{
			name: "a deadline before iptables gives up kills it and says the lock is held", timeout: 50 * time.Millisecond, held: true, block: true, locking: true,
			call: func(ipt host.IPTables) error { return ipt.ClearAndDeleteChain("nat", "CNI-X") },
			want: []error{host.ErrXtablesLock, context.DeadlineExceeded}, says: []string{"stopped after", "/run/test-xtables.lock is held by pid 4242"},
			ran: []string{"iptables -t nat -F CNI-X -w 1"},
		},
		{
			name: "a context already ended runs nothing", cancel: true, held: true, locking: true,
			call: func(ipt host.IPTables) error { _, err := ipt.List("nat", "POSTROUTING"); return err },
			want: []error{host.ErrXtablesLock, context.Canceled}, says: []string{"not run"},
		},
		{
			name: "on iptables-nft a killed command is the context's alone", timeout: 50 * time.Millisecond, held: true, block: true,
			call: func(ipt host.IPTables) error { _, err := ipt.List("nat", "POSTROUTING"); return err },
			want: []error{context.DeadlineExceeded}, ran: []string{"iptables -t nat -S POSTROUTING -w 1"},
		},
		{
			name: "iptables-save takes no lock and gets no -w", timeout: time.Minute, held: true, locking: true,
			call: func(ipt host.IPTables) error { _, err := ipt.(host.Saver).SaveAll(); return err },
			ran:  []string{"iptables-save "},
		},
		{
			name: "deleting a chain that is not there is no error and stops at the flush", timeout: time.Minute, locking: true,
			call: func(ipt host.IPTables) error { return ipt.ClearAndDeleteChain("nat", "CNI-NOPE") },
			ran:  []string{"iptables -t nat -F CNI-NOPE -w 59"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emu := newLegacy(t, fakes.NewIPTables())
			emu.Hold(tc.held, tc.block)
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if tc.timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
			}
			defer cancel()
			if tc.cancel {
				ctx, cancel = context.WithCancel(ctx)
				cancel()
			}
			err := tc.call(legacyHost(emu, tc.locking).WithContext(ctx))
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want it to wrap %v", err, want)
				}
			}
			if len(tc.want) == 0 && err != nil {
				t.Errorf("err = %v, want nil", err)
			}
			if tc.locking == false && errors.Is(err, host.ErrXtablesLock) {
				t.Errorf("err = %v: iptables-nft takes no lock", err)
			}
			for _, s := range tc.says {
				if !strings.Contains(fmt.Sprint(err), s) {
					t.Errorf("err = %v, want it to say %q", err, s)
				}
			}
			if ran := emu.Commands(); !slices.Equal(ran, tc.ran) {
				t.Errorf("ran %q, want %q", ran, tc.ran)
			}
		})
	}
}

func TestBindingKeepsEveryExtension(t *testing.T) {
	hostTables := &hostIPTables{list: "iptables", run: newLegacy(t, fakes.NewIPTables()).Run}
	for _, tc := range []struct {
		name   string
		ipt    host.ContextBinder
		probes bool
	}{
		{"iptables-legacy", hostTables, false},
		{"iptables-nft keeps its netlink probes", &nfIPTables{hostIPTables: hostTables, family: "ip"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound := tc.ipt.WithContext(context.Background())
			_, lists := bound.(host.TableLister)
			_, saves := bound.(host.Saver)
			_, restores := bound.(host.Restorer)
			_, binds := bound.(host.ContextBinder)
			_, writes := bound.(host.RuleWriter)
			if !lists || !saves || !restores || !binds || !writes {
				t.Errorf("bound: TableLister %v, Saver %v, Restorer %v, ContextBinder %v, RuleWriter %v; want all", lists, saves, restores, binds, writes)
			}
			if _, ok := BindContext(context.Background(), tc.ipt.(host.IPTables)).(host.RuleWriter); !ok {
				t.Error("BindContext hides RuleWriter")
			}
			_, probes := bound.(host.ChainProber)
			_, scans := bound.(host.AddrScanner)
			if probes != tc.probes || scans != tc.probes {
				t.Errorf("bound: ChainProber %v, AddrScanner %v; want %v", probes, scans, tc.probes)
			}
			if _, ok := BindContext(context.Background(), bound).(host.ChainProber); ok != tc.probes {
				t.Errorf("bound twice: ChainProber %v, want %v", ok, tc.probes)
			}
		})
	}
}

// iptables-nft's tables are nf_tables' while iptables resolves to the
// binary found on that backend: the repair watcher is told of every
// change to them. iptables-legacy's never are.
func TestIptablesNFTSaysItsTablesAreNFTablesWhileItIsTheSameBinary(t *testing.T) {
	dir := t.TempDir()
	nft, legacy, link := filepath.Join(dir, "xtables-nft-multi"), filepath.Join(dir, "xtables-legacy-multi"), filepath.Join(dir, "iptables")
	for _, bin := range []string{nft, legacy} {
		if err := os.WriteFile(bin, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(nft, link); err != nil {
		t.Fatal(err)
	}
	hostTables := &hostIPTables{list: link, run: newLegacy(t, fakes.NewIPTables()).Run}
	if _, ok := host.IPTables(hostTables).(host.NFTablesBacked); ok {
		t.Fatal("iptables-legacy says its tables may be nf_tables'")
	}
	bound := (&nfIPTables{hostIPTables: hostTables, family: "ip", resolved: nft}).WithContext(context.Background())
	backed, ok := bound.(host.NFTablesBacked)
	if !ok || !backed.OnNFTables() {
		t.Fatalf("iptables-nft, bound: NFTablesBacked %v, want its tables nf_tables'", ok)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(legacy, link); err != nil { // an operator switched the alternative
		t.Fatal(err)
	}
	if backed.OnNFTables() {
		t.Fatal("iptables now resolves to iptables-legacy, and its tables are still said to be nf_tables'")
	}
}
