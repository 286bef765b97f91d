package integration

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/links"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"golang.org/x/sys/unix"
)

// The host's Links reads devices as the kernel has them: a bridge, the
// host end of a veth enslaved to it, a device that is down; and the
// workload's end in its namespace, with its addresses of scope global
// and link (not lo's, of scope host). A namespace that is gone is
// os.ErrNotExist.
func TestLinkInspectorReadsDevicesAsTheKernelHasThem(t *testing.T) {
	netsandbox.Require(t)
	hostNS := netsandbox.NewWorkload(t) // stands in for the host's namespace
	wl := netsandbox.NewWorkload(t)
	l, err := links.New()
	if err != nil {
		t.Fatal(err)
	}
	inspector := l.(host.LinkInspector)
	global4, global6 := netip.MustParsePrefix("198.18.250.2/24"), netip.MustParsePrefix("fd00:198:18:fa::2/64")

	var bridgeMAC, vethMAC, eth0MAC string
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Inside Do, another goroutine: errors are returned, not fatal.
	must(hostNS.NS.Do(func(ns.NetNS) error {
		for _, link := range []netlink.Link{
			&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cnitbr0"}},
			&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cnitdown0"}, PeerName: "cnitdown1"},
			&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cnitveth0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(wl.NS.Fd()))},
		} {
			if err := netlink.LinkAdd(link); err != nil {
				return err
			}
		}
		br, err := netlink.LinkByName("cnitbr0")
		if err != nil {
			return err
		}
		veth, err := netlink.LinkByName("cnitveth0")
		if err != nil {
			return err
		}
		if err := errors.Join(netlink.LinkSetMasterByIndex(veth, br.Attrs().Index), netlink.LinkSetUp(veth), netlink.LinkSetUp(br)); err != nil {
			return err
		}
		// The bridge takes its port's MAC: read both once enslaved.
		if br, err = netlink.LinkByName("cnitbr0"); err != nil {
			return err
		}
		bridgeMAC, vethMAC = br.Attrs().HardwareAddr.String(), veth.Attrs().HardwareAddr.String()
		return nil
	}))
	must(wl.NS.Do(func(ns.NetNS) error {
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		for _, p := range []netip.Prefix{global4, global6} {
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}, Flags: unix.IFA_F_NODAD}
			if err := netlink.AddrAdd(eth0, addr); err != nil {
				return err
			}
		}
		eth0MAC = eth0.Attrs().HardwareAddr.String()
		return errors.Join(netlink.LinkSetUp(eth0), netlink.LinkSetUp(lo))
	}))

	var listed []host.LinkInfo
	must(hostNS.NS.Do(func(ns.NetNS) error {
		var err error
		listed, err = inspector.ListLinks()
		return err
	}))
	byName := map[string]host.LinkInfo{}
	for _, li := range listed {
		byName[li.Name] = li
	}
	for _, want := range []host.LinkInfo{
		{Name: "cnitbr0", MAC: bridgeMAC, Up: true},
		{Name: "cnitveth0", Master: "cnitbr0", MAC: vethMAC, Up: true},
		{Name: "lo"}, // an all-zero MAC is none
	} {
		if got := byName[want.Name]; got.Name != want.Name || got.Master != want.Master || got.MAC != want.MAC || got.Up != want.Up || got.Addrs != nil {
			t.Errorf("ListLinks: %+v, want %+v", got, want)
		}
	}
	if down := byName["cnitdown0"]; down.Name == "" || down.Up {
		t.Errorf("ListLinks: cnitdown0 is %+v, want it listed, down", down)
	}
	if len(listed) != 5 {
		t.Errorf("ListLinks listed %d devices, want the 5 of the namespace: %+v", len(listed), listed)
	}

	eth0, found, err := inspector.LinkIn(wl.Path, "eth0")
	if err != nil || !found || eth0.MAC != eth0MAC || !eth0.Up || eth0.Master != "" {
		t.Fatalf("LinkIn(eth0) = %+v, %v, %v; want it found, up, MAC %s", eth0, found, err, eth0MAC)
	}
	var has4, has6 bool
	for _, p := range eth0.Addrs {
		switch {
		case p == global4:
			has4 = true
		case p == global6:
			has6 = true
		case !p.Addr().IsLinkLocalUnicast():
			t.Errorf("LinkIn(eth0): address %s, neither one given nor link-local", p)
		}
	}
	if !has4 || !has6 {
		t.Errorf("LinkIn(eth0) addresses %v; want %s and %s among them", eth0.Addrs, global4, global6)
	}
	if lo, found, err := inspector.LinkIn(wl.Path, "lo"); err != nil || !found || len(lo.Addrs) != 0 {
		t.Errorf("LinkIn(lo) = %+v, %v, %v; want it found, without its addresses of scope host", lo, found, err)
	}
	if veth, found, err := inspector.LinkIn(hostNS.Path, "cnitveth0"); err != nil || !found || veth.Master != "cnitbr0" {
		t.Errorf("LinkIn(cnitveth0) = %+v, %v, %v; want its master named", veth, found, err)
	}
	if _, found, err := inspector.LinkIn(wl.Path, "eth1"); found || err != nil {
		t.Errorf("LinkIn(eth1) = %v, %v; want not found, no error", found, err)
	}
	notNS := filepath.Join(t.TempDir(), "unmounted")
	must(os.WriteFile(notNS, nil, 0o600))
	if _, _, err := inspector.LinkIn(notNS, "eth0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LinkIn of a file that holds no namespace = %v, want os.ErrNotExist", err)
	}
	must(wl.Delete())
	if _, _, err := inspector.LinkIn(wl.Path, "eth0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LinkIn of a deleted namespace = %v, want os.ErrNotExist", err)
	}
}
