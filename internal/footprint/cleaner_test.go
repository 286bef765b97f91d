package footprint

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/fakeipt"
	"github.com/seed1280861d/cninet/internal/iptables"
)

// TestCleanBehindAHeldLockChangesNothingAndTheNextCleanFinishes cleans
// alloc-1 of the captured two-attachment host through the host IPTables
// on an emulated iptables-legacy: while another process holds the lock,
// nothing is removed or reported removed, not even the reservation that
// proves alloc-1's address, and the error says why; once it is free, a
// second Clean removes alloc-1's chains, jumps and comment-less firewall
// rules (proven by that reservation) and leaves alloc-10's.
func TestCleanBehindAHeldLockChangesNothingAndTheNextCleanFinishes(t *testing.T) {
	var emus [2]*fakeipt.Legacy
	for i, v := range []string{"ipv4", "ipv6"} {
		tables := fakes.NewIPTables()
		for _, table := range []string{"nat", "filter"} {
			raw, err := os.ReadFile("../../testdata/iptables/dual-" + table + "-" + v + ".txt")
			if err != nil {
				t.Fatal(err)
			}
			tables.Load(table, string(raw))
		}
		emus[i] = emulateLegacy(t, tables)
	}
	hostTables := Seams{IPTables: func(v6 bool) (host.IPTables, error) {
		return iptables.NewEmulated(emus[b2i(v6)].Run, true, func(string) (int, bool) { return 4242, emus[b2i(v6)].IsHeld() }), nil
	}}
	net := Network{Name: "nomad", IfName: "eth0", IPAMDirs: []string{t.TempDir()}, CacheDir: t.TempDir()}
	reservation := filepath.Join(net.IPAMDirs[0], "198.18.0.2") // the proof of alloc-1's address
	if err := os.WriteFile(reservation, []byte("alloc-1\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	mine, theirs := Attachment{"nomad", "alloc-1"}, Attachment{"nomad", "alloc-10"}
	before := [2]string{emus[0].Tables.Save("nat"), emus[1].Tables.Save("nat")}

	for _, emu := range emus {
		emu.Hold(true, false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := NewCleaner(ctx, net, hostTables)
	cl.Prevent([]string{mine.ID})
	removed, err := cl.Clean([]string{mine.ID})
	if !errors.Is(err, host.ErrXtablesLock) || len(removed) > 0 {
		t.Fatalf("behind a held lock: removed %d, err = %v; want nothing removed and ErrXtablesLock", len(removed), err)
	}
	for i, emu := range emus {
		if now := emu.Tables.Save("nat"); now != before[i] {
			t.Errorf("%s nat changed behind a held lock:\n%s", familyName(i == 1), now)
		}
	}

	if _, err := os.Stat(reservation); err != nil {
		t.Errorf("the reservation went with the rules it proves still there: %v", err)
	}

	for _, emu := range emus {
		emu.Hold(false, false)
	}
	cl = NewCleaner(context.Background(), net, hostTables)
	cl.Prevent([]string{mine.ID})
	if _, err := cl.Clean([]string{mine.ID}); err != nil {
		t.Fatalf("once the lock is free: %v", err)
	}
	if _, err := os.Stat(reservation); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the reservation is left once the rules are gone: %v", err)
	}
	for i, emu := range emus {
		for _, chain := range []string{mine.MasqChain(), mine.DNATChain()} {
			if emu.Tables.HasChain("nat", chain) {
				t.Errorf("%s: %s of %s is left", familyName(i == 1), chain, mine.ID)
			}
		}
		if !emu.Tables.HasChain("nat", theirs.MasqChain()) || !emu.Tables.HasChain("nat", theirs.DNATChain()) {
			t.Errorf("%s: %s's chains were removed", familyName(i == 1), theirs.ID)
		}
		if v4 := i == 0; v4 && (mentions(emu.Tables.Rules("filter", firewallChain), "198.18.0.2/32") ||
			!mentions(emu.Tables.Rules("filter", firewallChain), "198.18.0.3/32")) {
			t.Errorf("CNI-FORWARD after the second Clean: %q, want alloc-10's rules only", emu.Tables.Rules("filter", firewallChain))
		}
		if !slices.ContainsFunc(emu.Commands(), func(c string) bool { return strings.HasPrefix(c, "iptables-restore --noflush -w ") }) {
			t.Errorf("%s: the deletions were not one iptables-restore: %q", familyName(i == 1), emu.Commands())
		}
	}
}

func mentions(rules []string, s string) bool {
	return slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, s) })
}

func TestCleanWithAnEndedContextRunsNothingAndKeepsTheProof(t *testing.T) {
	tables := fakes.NewIPTables()
	raw, err := os.ReadFile("../../testdata/iptables/dual-nat-ipv4.txt")
	if err != nil {
		t.Fatal(err)
	}
	emu := emulateLegacy(t, tables.Load("nat", string(raw)))
	hostTables := Seams{IPTables: func(bool) (host.IPTables, error) {
		return iptables.NewEmulated(emu.Run, true, func(string) (int, bool) { return 4242, emu.IsHeld() }), nil
	}}
	net := Network{Name: "nomad", IfName: "eth0", IPAMDirs: []string{t.TempDir()}, CacheDir: t.TempDir()}
	reservation := filepath.Join(net.IPAMDirs[0], "198.18.0.2")
	if err := os.WriteFile(reservation, []byte("alloc-1\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cl := NewCleaner(ctx, net, hostTables)
	cl.Prevent([]string{"alloc-1"})
	removed, err := cl.Clean([]string{"alloc-1"})
	if !errors.Is(err, context.Canceled) || len(removed) > 0 {
		t.Errorf("removed %d, err = %v; want nothing removed and the context's error", len(removed), err)
	}
	if ran := emu.Commands(); len(ran) > 0 {
		t.Errorf("ran %q after the context ended", ran)
	}
	if _, err := os.Stat(reservation); err != nil {
		t.Errorf("the reservation went with the rules it proves still there: %v", err)
	}
}

// emulateLegacy emulates iptables-legacy over tables, giving up on a held
// lock as iptables 1.8.9 did (testdata/iptables/xtables-lock.txt).
func emulateLegacy(t *testing.T, tables *fakes.IPTables) *fakeipt.Legacy {
	t.Helper()
	msgs, err := fakeipt.LockMessages("../../testdata/iptables/xtables-lock.txt")
	if err != nil {
		t.Fatal(err)
	}
	giveUp, ok := msgs["iptables-legacy -w 1 -t nat -S POSTROUTING"]
	if !ok || len(msgs) != 6 {
		t.Fatalf("%d captured messages, none for iptables-legacy -w 1 -t nat -S POSTROUTING; want 6", len(msgs))
	}
	return fakeipt.NewLegacy(tables, giveUp)
}
