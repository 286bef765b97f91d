package cninet_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

// driftEnv is a Configurator on cninettest's fake host with two live
// allocations: web-1, whose footprint the tests take apart, and its
// neighbour web-2.
type driftEnv struct {
	env        *cninettest.Env
	c          *cninet.Configurator
	web, neigh *cninet.Allocation
	netns      string
}

func newDriftEnv(t *testing.T) driftEnv {
	t.Helper()
	env, err := cninettest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := cninet.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d := driftEnv{env: env, c: c, netns: "/var/run/netns/web",
		web:   &cninet.Allocation{ID: "web-1", Ports: []cninet.Port{{Label: "http", Value: 8080, To: 80}}},
		neigh: &cninet.Allocation{ID: "web-2", Ports: []cninet.Port{{Label: "http", Value: 8081, To: 80}}}}
	for _, a := range []*cninet.Allocation{d.web, d.neigh} {
		if _, err := c.Setup(context.Background(), a, d.netns); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// lines returns the host's iptables lines of id's footprint.
func (d driftEnv) lines(id string) []string {
	var out []string
	for _, fp := range d.env.CNI.Footprints(id) {
		for _, l := range strings.Split(fp.NAT()+"\n"+fp.Filter(), "\n") {
			if l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// unload removes from the host's IPv4 tables the lines of id's footprint
// that contain sub.
func (d driftEnv) unload(t *testing.T, id, table, sub string) {
	t.Helper()
	n := 0
	for _, l := range d.lines(id) {
		if strings.HasPrefix(l, "-A ") && strings.Contains(l, sub) {
			d.env.Host.IPv4.Unload(table, l)
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no line of %s's footprint contains %q", id, sub)
	}
}

func TestRepairRestoresWhatADriftTookInPlaceAndNothingElse(t *testing.T) {
	cases := []struct {
		name   string
		drift  func(t *testing.T, d driftEnv)
		plugin string // whose ADD the repair runs, "" for none
		names  string // in what Check found missing
	}{
		{name: "a deleted DNAT jump is written again by portmap's own ADD", plugin: "portmap", names: "CNI-HOSTPORT-DNAT: jump of tcp ports 8080",
			drift: func(t *testing.T, d driftEnv) { d.unload(t, "web-1", "nat", "-A CNI-HOSTPORT-DNAT") }},
		{name: "deleted forward rules are written again by the firewall plugin's own ADD", plugin: "firewall", names: "CNI-FORWARD: accept from",
			drift: func(t *testing.T, d driftEnv) { d.unload(t, "web-1", "filter", "-A CNI-FORWARD") }},
		{name: "a deleted reservation is written again as host-local wrote it", names: "ip reservation",
			drift: func(t *testing.T, d driftEnv) {
				addrs, _ := d.env.Reservations()
				if err := os.Remove(filepath.Join(reservationDir(d), addrs[0])); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriftEnv(t)
			ctx := context.Background()
			whole := sortedDump(d.env.Host)
			resBefore, _ := os.ReadFile(filepath.Join(reservationDir(d), "198.18.0.2"))
			if err := d.c.Check(ctx, d.web, d.netns); err != nil {
				t.Fatalf("Check of a whole attachment: %v", err)
			}
			tc.drift(t, d)
			err := d.c.Check(ctx, d.web, d.netns)
			var de *cninet.DriftError
			if !errors.Is(err, cninet.ErrCheckFailed) || !errors.As(err, &de) || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("Check after the drift: %v, want ErrCheckFailed with a DriftError naming %q", err, tc.names)
			}
			if de.Drifts[0].ID != "web-1" || len(de.Drifts) != 1 {
				t.Fatalf("drifts %+v, want web-1's alone", de.Drifts)
			}
			v4 := len(d.env.Host.IPv4.Calls())
			if err := d.c.Check(ctx, d.web, d.netns, cninet.CheckOptions{Repair: true}); err != nil {
				t.Fatalf("Repair: %v", err)
			}
			if got := sortedDump(d.env.Host); got != whole {
				t.Fatalf("after the repair the host is\n%s\nwant, as a multiset, what the plugins wrote\n%s", got, whole)
			}
			for _, call := range d.env.Host.IPv4.Calls()[v4:] {
				if strings.HasPrefix(call, "Delete") || strings.HasPrefix(call, "ClearAndDeleteChain") {
					t.Fatalf("the repair called %s: it deletes nothing", call)
				}
			}
			if res, _ := os.ReadFile(filepath.Join(reservationDir(d), "198.18.0.2")); string(res) != string(resBefore) {
				t.Fatalf("reservation %q, want %q as host-local wrote it", res, resBefore)
			}
			if got := pluginADDs(d.env.CNI); tc.plugin == "" && len(got) > 0 || tc.plugin != "" && !slices.Equal(got, []string{"AddPlugin " + tc.plugin}) {
				t.Fatalf("plugins run alone: %q, want %q's ADD once", got, tc.plugin)
			}
			if err := d.c.Check(ctx, d.web, d.netns, cninet.CheckOptions{Repair: true}); err != nil {
				t.Fatalf("a second Repair: %v", err)
			}
			if got := sortedDump(d.env.Host); got != whole || len(pluginADDs(d.env.CNI)) > 1 {
				t.Fatalf("a second Repair changed the host or ran a plugin again (%q)", pluginADDs(d.env.CNI))
			}
		})
	}
}

func reservationDir(d driftEnv) string {
	var conf struct {
		Plugins []struct {
			IPAM struct {
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	json.Unmarshal(d.env.Config.ConfList, &conf)
	for _, p := range conf.Plugins {
		if p.IPAM.DataDir != "" {
			return filepath.Join(p.IPAM.DataDir, cninettest.Network)
		}
	}
	return ""
}

// sortedDump is the host's dump, its lines sorted: a repair appends a
// rule where the plugin appends it, which may be after another
// attachment's, as iptables would.
func sortedDump(h *fakes.Host) string {
	lines := strings.Split(h.Dump(), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// pluginADDs are the plugin ADDs a fake CNI ran alone.
func pluginADDs(f *fakes.CNI) []string {
	var out []string
	for _, v := range f.Verbs() {
		if strings.HasPrefix(v, "AddPlugin ") {
			out = append(out, v)
		}
	}
	return out
}

func TestDriftsListsEveryAttachedRecordWithWhatItMisses(t *testing.T) {
	d := newDriftEnv(t)
	d.unload(t, "web-2", "filter", "-A CNI-FORWARD -s")
	drifts, err := d.c.Drifts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(drifts) != 2 || drifts[0].ID != "web-1" || len(drifts[0].Missing) != 0 || drifts[1].ID != "web-2" || len(drifts[1].Missing) != 1 {
		t.Fatalf("drifts %+v, want web-1 whole and web-2 missing its forward rule", drifts)
	}
	only, err := d.c.Drifts(context.Background(), "web-2")
	if err != nil || len(only) != 1 || only[0].ID != "web-2" {
		t.Fatalf("Drifts of web-2: %+v, %v", only, err)
	}
	if _, err := d.c.Drifts(context.Background(), "a/b"); !errors.Is(err, cninet.ErrInvalidAllocation) {
		t.Fatalf("Drifts of a bad id: %v, want ErrInvalidAllocation", err)
	}
}
