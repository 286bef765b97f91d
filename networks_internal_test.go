package cninet

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// multiFixture is a Configurator over a ConfDir of three networks: a (the
// default) and b, bridge networks with port mappings, and c, a ptp network
// without. a as eth0 goes through the fake go-cni, everything else
// through the fake driver.
type multiFixture struct {
	c       *Configurator
	cni     *fakes.CNI
	drv     *fakeDriver
	v4, v6  *fakes.IPTables
	nft     *fakes.NFTables
	dir     string
	ipamDir string
	cache   string
	state   string

	retry      RetryPolicy
	pluginDirs []string
}

func newMultiFixture(t *testing.T, retry RetryPolicy, pluginDirs ...string) multiFixture {
	t.Helper()
	f := multiFixture{cni: &fakes.CNI{}, drv: &fakeDriver{addErrs: map[string][]error{}, checkErrs: map[string]error{}},
		v4: fakes.NewIPTables(), v6: fakes.NewIPTables(), nft: &fakes.NFTables{}, dir: t.TempDir(), ipamDir: t.TempDir(), cache: t.TempDir()}
	for i, name := range []string{"a", "b"} {
		conf, err := BridgeConfList(BridgeConfig{NetworkName: name, BridgeName: "br-" + name,
			IPv4Subnet: fmt.Sprintf("198.18.%d.0/24", i), IPAMDataDir: f.ipamDir})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := WriteConfList(f.dir, conf); err != nil {
			t.Fatal(err)
		}
	}
	ptp := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"ptp","ipMasq":true,
		"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"198.18.2.0/24"}]]}}]}`, f.ipamDir)
	if _, err := WriteConfList(f.dir, []byte(ptp)); err != nil {
		t.Fatal(err)
	}
	if len(pluginDirs) == 0 {
		pluginDirs = []string{t.TempDir()} // no plugin ever runs from here
	}
	f.state, f.retry, f.pluginDirs = t.TempDir(), retry, pluginDirs
	f.drv.cacheDir = f.cache
	f.c = f.configurator(t)
	return f
}

// configurator returns a Configurator of the fixture's host: its conf
// dir, fakes, cache and registry, as a restarted runner has them.
func (f multiFixture) configurator(t *testing.T) *Configurator {
	t.Helper()
	c, err := New(Config{ConfDir: f.dir, NetworkName: "a", CNI: f.cni, CacheDir: f.cache, StateDir: f.state, Retry: f.retry, PluginDirs: f.pluginDirs,
		NFTables: func() (host.NFTables, error) { return f.nft, nil },
		IPTables: func(v6 bool) (host.IPTables, error) {
			if v6 {
				return f.v6, nil
			}
			return f.v4, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.drivers.Lib = f.drv
	return c
}

var quickRetry = RetryPolicy{Attempts: 2, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}

// cniVerbs are the fake go-cni's attach calls, without its bookkeeping.
func (f multiFixture) cniVerbs() string {
	var v []string
	for _, s := range f.cni.Verbs() {
		if s != "Status" && s != "Load" {
			v = append(v, s)
		}
	}
	return strings.Join(v, " ")
}

// leakMasquerade plants the bridge plugin's iptables masquerade rule and
// chain of (network, id), as its DEL leaves them when the namespace is gone.
func (f multiFixture) leakMasquerade(network, id, ip string) {
	o := footprint.Attachment{Network: network, ID: id}
	f.v4.Load("nat", fmt.Sprintf("-N %s\n-A POSTROUTING -s %s/32 %s\n", o.MasqChain(), ip,
		fakes.FormatRule([]string{"-m", "comment", "--comment", o.MasqComment(), "-j", o.MasqChain()})))
}

func (f multiFixture) hasMasquerade(network, id string) bool {
	return f.v4.HasChain("nat", footprint.Attachment{Network: network, ID: id}.MasqChain())
}

func TestNewKnowsEveryNetworkInConfDirTheDefaultFirst(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	if got := strings.Join(f.c.Networks(), " "); got != "a b c" {
		t.Fatalf("Networks() = %q, want every network in ConfDir, the default first", got)
	}
	if f.c.NetworkName() != "a" {
		t.Fatalf("NetworkName() = %q, want the default", f.c.NetworkName())
	}
}
