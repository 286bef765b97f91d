package footprint_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/seed1280861d/cninet/internal/fakeipt"
	"github.com/seed1280861d/cninet/internal/fakenft"
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

func pluginHost(links *fakeLinks, nets ...footprint.Network) footprint.Host {
	ipt := fakeipt.New()
	return footprint.Host{
		IPTables: func(bool) (footprint.IPTables, error) { return ipt, nil },
		NFTables: func() (footprint.NFTables, error) { return &fakenft.NFTables{}, nil },
		Links:    func() (footprint.Links, error) { return links, nil },
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
			n := footprint.Network{Name: "bw", IfName: "eth0", CacheDir: t.TempDir(), Bandwidth: tc.bandwidth}
			cl := footprint.NewCleaner(context.Background(), n, pluginHost(links))
			if err := cl.Remember([]string{"a"}); err != nil {
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
	n := footprint.Network{Name: "tn", IfName: "eth0", CacheDir: t.TempDir(), TuningDirs: []string{dir}}

	// Teardown of a on eth0: a's eth1 belongs to its other network.
	cl := footprint.NewCleaner(context.Background(), n, pluginHost(&fakeLinks{}))
	if err := cl.Remember([]string{"a"}); err != nil {
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
	items, err := sweep.CleanAll([]footprint.Attachment{{Network: "tn", ID: "b"}})
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
		name    string
		plugins []footprint.Plugin
		want    footprint.Network
	}{
		{"host-local's default directory, joined with the network", []footprint.Plugin{
			{Type: "bridge", Bytes: []byte(`{"type":"bridge","ipam":{"type":"host-local"}}`)}},
			footprint.Network{Name: "n", IPAMDirs: []string{"/var/lib/cni/networks/n"}}},
		{"the firewall plugin", []footprint.Plugin{{Type: "firewall", Bytes: []byte(`{"type":"firewall","backend":"iptables"}`)}},
			footprint.Network{Name: "n", Firewall: true}},
		{"host-local's own dataDir; portmap on nftables", []footprint.Plugin{
			{Type: "bridge", Bytes: []byte(`{"type":"bridge","ipam":{"type":"host-local","dataDir":"/run/cni"}}`)},
			{Type: "portmap", Bytes: []byte(`{"type":"portmap","backend":"nftables"}`)}},
			footprint.Network{Name: "n", IPAMDirs: []string{"/run/cni/n"}, HostportNFT: true}},
		{"portmap on iptables, static IPAM: no reservations", []footprint.Plugin{
			{Type: "ptp", Bytes: []byte(`{"type":"ptp","ipam":{"type":"static"}}`)},
			{Type: "portmap", Bytes: []byte(`{"type":"portmap","backend":"iptables"}`)}},
			footprint.Network{Name: "n"}},
		{"bandwidth and tuning, default and own directory", []footprint.Plugin{
			{Type: "bandwidth", Bytes: []byte(`{"type":"bandwidth"}`)},
			{Type: "tuning", Bytes: []byte(`{"type":"tuning"}`)},
			{Type: "tuning", Bytes: []byte(`{"type":"tuning","dataDir":"/run/t"}`)}},
			footprint.Network{Name: "n", Bandwidth: true, TuningDirs: []string{"/run/cni/tuning", "/run/t"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := footprint.NetworkOf("n", tc.plugins); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("NetworkOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
