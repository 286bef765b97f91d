package footprint_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// fakeLinks is the host namespace's network devices, in memory.
type fakeLinks struct {
	mu    sync.Mutex
	names map[string]bool
	asked int
}

func (l *fakeLinks) LinkExists(name string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked++
	return l.names[name], nil
}

func (l *fakeLinks) DeleteLink(name string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	had := l.names[name]
	delete(l.names, name)
	return had, nil
}

func (l *fakeLinks) left() []string {
	var out []string
	for n := range l.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func pluginHost(links *fakeLinks, nets ...footprint.Network) footprint.Seams {
	ipt := fakes.NewIPTables()
	return footprint.Seams{
		IPTables: func(bool) (host.IPTables, error) { return ipt, nil },
		NFTables: func() (host.NFTables, error) { return &fakes.NFTables{}, nil },
		Links:    func() (host.Links, error) { return links, nil },
		Networks: nets,
	}
}

func TestBandwidthDeviceIsNamedAsThePluginNamesIt(t *testing.T) {
	// The bandwidth plugin's own test expects this name for network
	// "cni-plugin-bandwidth-test" and container id "dummy".
	if got := (footprint.Attachment{Network: "cni-plugin-bandwidth-test", ID: "dummy"}).BandwidthDevice(); got != "bwpa8eda89404b7" {
		t.Fatalf("BandwidthDevice() = %q, want bwpa8eda89404b7", got)
	}
}

func TestTeardownRemovesTheBandwidthDeviceOfItsAttachmentOnly(t *testing.T) {
	mine, other := footprint.Attachment{Network: "bw", ID: "a"}, footprint.Attachment{Network: "bw", ID: "ab"}
	for _, tc := range []struct {
		name      string
		bandwidth bool
		left      []string
		asked     bool
	}{
		{"a network with bandwidth: its device goes", true, []string{other.BandwidthDevice()}, true},
		{"a network without bandwidth: no device is even looked for", false, []string{mine.BandwidthDevice(), other.BandwidthDevice()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			links := &fakeLinks{names: map[string]bool{mine.BandwidthDevice(): true, other.BandwidthDevice(): true}}
			n := footprint.Network{Name: "bw", IfName: "eth0", CacheDir: t.TempDir()}
			if tc.bandwidth {
				n.Plugins = []footprint.Plugin{{Type: "bandwidth", Bytes: []byte(`{"type":"bandwidth"}`)}}
			}
			cl := footprint.NewCleaner(context.Background(), n, pluginHost(links))
			if _, err := cl.Prevent([]string{"a"}); err != nil {
				t.Fatal(err)
			}
			items, err := cl.Clean([]string{"a"})
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(tc.left)
			if got := links.left(); !slices.Equal(got, tc.left) {
				t.Errorf("devices left %q, want %q", got, tc.left)
			}
			if (links.asked > 0) != tc.asked {
				t.Errorf("devices looked up %d times, want some: %v", links.asked, tc.asked)
			}
			if tc.bandwidth && (len(items) != 1 || items[0].Kind != footprint.KindLink || items[0].Backend != "links") {
				t.Errorf("reported %+v, want the device", items)
			}
		})
	}
}

func TestTuningFilesGoWithTheirAttachmentsInterface(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a_eth0.json", "a_eth1.json", "b_eth0.json", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := footprint.Network{Name: "tn", IfName: "eth0", CacheDir: t.TempDir(),
		Plugins: []footprint.Plugin{{Type: "tuning", Bytes: []byte(`{"type":"tuning","dataDir":"` + dir + `"}`)}}}

	// Teardown of a on eth0: a's eth1 belongs to its other network.
	cl := footprint.NewCleaner(context.Background(), n, pluginHost(&fakeLinks{}))
	if _, err := cl.Prevent([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Clean([]string{"a"}); err != nil {
		t.Fatal(err)
	}
	assertDir(t, dir, "a_eth1.json", "b_eth0.json", "notes.txt")

	// GC finds b by its file and removes it.
	n.IfNames = []string{"eth0", "eth1"}
	sweep := footprint.NewSweep(context.Background(), pluginHost(&fakeLinks{}, n))
	found, err := sweep.DiscoverAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := []footprint.Attachment{{Network: "tn", ID: "a"}, {Network: "tn", ID: "b"}}; !reflect.DeepEqual(found, want) {
		t.Fatalf("DiscoverAll = %v, want %v", found, want)
	}
	err = sweep.CleanAll([]footprint.Attachment{{Network: "tn", ID: "b"}})
	items := sweep.Removed()
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].Kind != footprint.KindTuningFile || items[0].ID != "b" {
		t.Errorf("GC reported %+v, want b's tuning file", items)
	}
	assertDir(t, dir, "a_eth1.json", "notes.txt")
}

func assertDir(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want %q", dir, got, want)
	}
}

func TestNetworkOfReadsWhereAConflistsPluginsKeepState(t *testing.T) {
	for _, tc := range []struct {
		name        string
		plugins     []string // configurations, each with its "type"
		ipamDirs    []string
		hostportNFT bool
	}{
		{"host-local's default directory, joined with the network",
			[]string{`{"type":"bridge","ipam":{"type":"host-local"}}`}, []string{"/var/lib/cni/networks/n"}, false},
		{"host-local's own dataDir; portmap on nftables",
			[]string{`{"type":"bridge","ipam":{"type":"host-local","dataDir":"/run/cni"}}`, `{"type":"portmap","backend":"nftables"}`},
			[]string{"/run/cni/n"}, true},
		{"static IPAM and portmap on iptables: no reservations, no nftables",
			[]string{`{"type":"ptp","ipam":{"type":"static"}}`, `{"type":"portmap","backend":"iptables"}`}, nil, false},
		{"a configuration that does not decode is passed over",
			[]string{`{"type":"bridge","ipam":`, `{"type":"portmap","backend":"nftables"}`}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var plugins []footprint.Plugin
			for _, raw := range tc.plugins {
				var typ struct{ Type string }
				_ = json.Unmarshal([]byte(raw), &typ)
				plugins = append(plugins, footprint.Plugin{Type: typ.Type, Bytes: []byte(raw)})
			}
			got := footprint.NetworkOf("n", plugins)
			if !slices.Equal(got.IPAMDirs, tc.ipamDirs) || got.HostportNFT != tc.hostportNFT || len(got.Plugins) != len(plugins) {
				t.Errorf("NetworkOf = %+v, want IPAMDirs %q, HostportNFT %v and the plugins", got, tc.ipamDirs, tc.hostportNFT)
			}
		})
	}
}
