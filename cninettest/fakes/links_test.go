package fakes_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

func TestLinksInspectsTheHostsDevicesAndAWorkloadsNamespace(t *testing.T) {
	l := &fakes.Links{}
	l.AddLinks(host.LinkInfo{Name: "veth1", Master: "cni0", MAC: "aa:bb:cc:dd:ee:01", Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("fe80::1/64")}},
		host.LinkInfo{Name: "cni0", MAC: "aa:bb:cc:dd:ee:00", Up: true})
	l.Add("bwp0123456789ab")
	eth0 := host.LinkInfo{Name: "eth0", MAC: "aa:bb:cc:dd:ee:02", Up: true,
		Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.1.2/24"), netip.MustParsePrefix("fd00:198:18::2/64")}}
	l.AddIn("/run/netns/web-1", eth0)

	listed, err := l.ListLinks()
	want := []host.LinkInfo{{Name: "bwp0123456789ab"}, {Name: "cni0", MAC: "aa:bb:cc:dd:ee:00", Up: true},
		{Name: "veth1", Master: "cni0", MAC: "aa:bb:cc:dd:ee:01", Up: true}}
	if err != nil || !reflect.DeepEqual(listed, want) {
		t.Errorf("ListLinks = %+v, %v\nwant %+v (sorted, no addresses)", listed, err, want)
	}
	for _, tc := range []struct {
		name, netns, dev string
		want             host.LinkInfo
		found            bool
		gone             bool
	}{
		{"a device there, with its addresses", "/run/netns/web-1", "eth0", eth0, true, false},
		{"a device not there", "/run/netns/web-1", "eth1", host.LinkInfo{}, false, false},
		{"a namespace never added is gone", "/run/netns/web-2", "eth0", host.LinkInfo{}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := l.LinkIn(tc.netns, tc.dev)
			if errors.Is(err, os.ErrNotExist) != tc.gone || (err != nil && !tc.gone) {
				t.Fatalf("LinkIn = %v; want an error wrapping os.ErrNotExist: %v", err, tc.gone)
			}
			if found != tc.found || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("LinkIn = %+v, %v; want %+v, %v", got, found, tc.want, tc.found)
			}
		})
	}
	if !l.DeleteIn("/run/netns/web-1", "eth0") {
		t.Error("DeleteIn of eth0: not there")
	}
	if _, found, err := l.LinkIn("/run/netns/web-1", "eth0"); found || err != nil {
		t.Errorf("after DeleteIn: LinkIn = %v, %v; want not found in a namespace still there", found, err)
	}
	l.RemoveNetns("/run/netns/web-1")
	if _, _, err := l.LinkIn("/run/netns/web-1", "eth0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after RemoveNetns: LinkIn = %v, want os.ErrNotExist", err)
	}
	if removed, _ := l.DeleteLink("veth1"); !removed {
		t.Error("DeleteLink(veth1): not there")
	}
	if ok, _ := l.LinkExists("veth1"); ok {
		t.Error("veth1 still there after DeleteLink")
	}
}

// The fake CNI's ADD makes the bridge plugin's devices, its DEL takes
// the workload's interface away; ids a test attaches to one namespace
// path share the interface, each with its own address.
func TestCNIKeepsTheBridgePluginsDevices(t *testing.T) {
	h := fakes.NewHost()
	f := loaded(t, &fakes.CNI{Host: h}, conflist(""))
	const netns = "/var/run/netns/web"
	for _, id := range []string{"a", "b"} {
		if _, err := f.Setup(context.Background(), id, netns); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := h.Devices.LinkExists("cni0"); !ok {
		t.Error("no bridge cni0 after an ADD (the bridge plugin's default name)")
	}
	eth0, found, err := h.Devices.LinkIn(netns, "eth0")
	want := []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24"), netip.MustParsePrefix("fd00:198:18::2/64"),
		netip.MustParsePrefix("198.18.0.3/24"), netip.MustParsePrefix("fd00:198:18::3/64")}
	if err != nil || !found || !eth0.Up || !reflect.DeepEqual(eth0.Addrs, want) {
		t.Fatalf("LinkIn(eth0) = %+v, %v, %v; want it up with %v", eth0, found, err, want)
	}
	if err := f.Remove(context.Background(), "a", netns); err != nil {
		t.Fatal(err)
	}
	if eth0, _, _ := h.Devices.LinkIn(netns, "eth0"); !reflect.DeepEqual(eth0.Addrs, want[2:]) {
		t.Errorf("after a's DEL: eth0 holds %v, want b's %v alone", eth0.Addrs, want[2:])
	}
	if err := f.Remove(context.Background(), "b", netns); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := h.Devices.LinkIn(netns, "eth0"); found {
		t.Error("eth0 still there after the last DEL")
	}
	if ok, _ := h.Devices.LinkExists("cni0"); !ok {
		t.Error("the bridge went with the last DEL; the plugin leaves it")
	}
}
