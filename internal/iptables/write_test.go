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
)

const masqRule = `-A POSTROUTING -s 198.18.0.2/32 -m comment --comment "name: \"net\" id: \"web-1\"" -j CNI-0123456789abcdef01234567`

var masqSpec = []string{"-s", "198.18.0.2/32", "-m", "comment", "--comment", `name: "net" id: "web-1"`, "-j", "CNI-0123456789abcdef01234567"}

func TestBoundHostIPTablesWritesAsGoIPTablesDoes(t *testing.T) {
	t.Setenv("XTABLES_LOCKFILE", "/run/test-xtables.lock")
	for _, tc := range []struct {
		name    string
		nat     string // the nat table's listing before
		held    bool   // another process holds the xtables lock
		call    func(w host.RuleWriter) (bool, error)
		want    bool
		wantErr []error // errors.Is; none: no error
		says    string
		ran     string
		after   []string // the nat table's POSTROUTING after
	}{
		{
			name: "a rule that is there exists", nat: "-N CNI-0123456789abcdef01234567\n" + masqRule,
			call: func(w host.RuleWriter) (bool, error) { return w.Exists("nat", "POSTROUTING", masqSpec...) },
			want: true, ran: "iptables -t nat -C POSTROUTING " + strings.Join(masqSpec, " ") + " -w 59", after: []string{masqRule},
		},
		{
			name: "-C's exit status 1 is a rule that is not there, not an error",
			call: func(w host.RuleWriter) (bool, error) { return w.Exists("nat", "POSTROUTING", masqSpec...) },
			want: false, ran: "iptables -t nat -C POSTROUTING " + strings.Join(masqSpec, " ") + " -w 59",
		},
		{
			name: "a check that could not have the lock is an error, not absence", held: true,
			call:    func(w host.RuleWriter) (bool, error) { return w.Exists("nat", "POSTROUTING", masqSpec...) },
			wantErr: []error{host.ErrXtablesLock}, ran: "iptables -t nat -C POSTROUTING " + strings.Join(masqSpec, " ") + " -w 59",
		},
		{
			name: "a chain that is there exists", nat: "-N CNI-0123456789abcdef01234567",
			call: func(w host.RuleWriter) (bool, error) { return w.ChainExists("nat", "CNI-0123456789abcdef01234567") },
			want: true, ran: "iptables -t nat -S CNI-0123456789abcdef01234567 -w 59",
		},
		{
			name: "a chain that is not there does not",
			call: func(w host.RuleWriter) (bool, error) { return w.ChainExists("nat", "CNI-0123456789abcdef01234567") },
			want: false, ran: "iptables -t nat -S CNI-0123456789abcdef01234567 -w 59",
		},
		{
			name: "a chain probe that could not have the lock is an error, not absence", held: true,
			call:    func(w host.RuleWriter) (bool, error) { return w.ChainExists("nat", "CNI-0123456789abcdef01234567") },
			wantErr: []error{host.ErrXtablesLock}, ran: "iptables -t nat -S CNI-0123456789abcdef01234567 -w 59",
		},
		{
			name: "a new chain", call: func(w host.RuleWriter) (bool, error) {
				return false, w.NewChain("nat", "CNI-0123456789abcdef01234567")
			},
			ran: "iptables -t nat -N CNI-0123456789abcdef01234567 -w 59",
		},
		{
			name: "a new chain that exists is an error", nat: "-N CNI-0123456789abcdef01234567",
			call: func(w host.RuleWriter) (bool, error) {
				return false, w.NewChain("nat", "CNI-0123456789abcdef01234567")
			},
			wantErr: []error{errors.New("any")}, says: "Chain already exists", ran: "iptables -t nat -N CNI-0123456789abcdef01234567 -w 59",
		},
		{
			name: "an appended rule goes last", nat: "-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT",
			call:  func(w host.RuleWriter) (bool, error) { return false, w.Append("nat", "POSTROUTING", masqSpec...) },
			ran:   "iptables -t nat -A POSTROUTING " + strings.Join(masqSpec, " ") + " -w 59",
			after: []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqRule},
		},
		{
			name: "an inserted rule goes where it is told", nat: "-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT",
			call:  func(w host.RuleWriter) (bool, error) { return false, w.Insert("nat", "POSTROUTING", 1, masqSpec...) },
			ran:   "iptables -t nat -I POSTROUTING 1 " + strings.Join(masqSpec, " ") + " -w 59",
			after: []string{masqRule, "-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emu := newLegacy(t, fakes.NewIPTables().Load("nat", tc.nat))
			emu.Hold(tc.held, false)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			got, err := tc.call(legacyHost(emu, true).WithContext(ctx).(host.RuleWriter))
			if len(tc.wantErr) == 0 && err != nil {
				t.Fatalf("err = %v, want none", err)
			}
			if len(tc.wantErr) > 0 && err == nil {
				t.Fatal("err = nil, want one")
			}
			for _, want := range tc.wantErr {
				if want.Error() != "any" && !errors.Is(err, want) {
					t.Errorf("err = %v, want it to wrap %v", err, want)
				}
			}
			if !strings.Contains(fmt.Sprint(err), tc.says) {
				t.Errorf("err = %v, want it to say %q", err, tc.says)
			}
			if got != tc.want {
				t.Errorf("answer = %v, want %v", got, tc.want)
			}
			if ran := emu.Commands(); !slices.Equal(ran, []string{tc.ran}) {
				t.Errorf("ran %q, want %q", ran, tc.ran)
			}
			if after := emu.Tables.Rules("nat", "POSTROUTING"); !slices.Equal(after, tc.after) {
				t.Errorf("POSTROUTING after: %q, want %q", after, tc.after)
			}
		})
	}
}

func TestUnboundWritesRunUnderTheLockWaitOfAllCommands(t *testing.T) {
	emu := newLegacy(t, fakes.NewIPTables())
	w := legacyHost(emu, true) // unbound: go-iptables' own methods (embedded) are not used
	if err := w.Append("nat", "POSTROUTING", masqSpec...); err != nil {
		t.Fatal(err)
	}
	want := "iptables -t nat -A POSTROUTING " + strings.Join(masqSpec, " ") + " -w 29"
	if ran := emu.Commands(); !slices.Equal(ran, []string{want}) {
		t.Errorf("ran %q, want %q: the command runner, waiting DefaultLockWait for the lock", ran, want)
	}
}

func TestNFChainExistsKnowsTheBuiltinChainsWithoutAProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "iptables-nft")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	emu := newLegacy(t, fakes.NewIPTables())
	h := &nfIPTables{hostIPTables: legacyHost(emu, false), family: "ip", resolved: bin}
	h.list = bin
	for _, chain := range builtinChains["nat"] {
		if ok, err := h.ChainExists("nat", chain); !ok || err != nil {
			t.Errorf("ChainExists(nat, %s) = %v, %v; want true: iptables-nft lists it whether nf_tables has it yet or not", chain, ok, err)
		}
	}
	if ran := emu.Commands(); len(ran) != 0 {
		t.Errorf("ran %q, want no command", ran)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if ok, err := h.ChainExists("nat", "POSTROUTING"); ok || !errors.Is(err, errBackendSwitched) {
		t.Errorf("after iptables was switched: ChainExists = %v, %v; want %v", ok, err, errBackendSwitched)
	}
}
