package links

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/seed1280861d/cninet/host"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// dumpAttempts bounds the retries of a dump that a concurrent change
// interrupted (a device came or went while the kernel sent the list).
const dumpAttempts = 5

// ListLinks implements LinkInspector: one dump of the caller's network
// namespace, each device's master named from the same dump.
func (hostLinks) ListLinks() ([]host.LinkInfo, error) {
	links, err := retryInterrupted(func() ([]netlink.Link, error) { return netlink.LinkList() })
	if err != nil {
		return nil, fmt.Errorf("listing network devices: %w", err)
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	out := make([]host.LinkInfo, 0, len(links))
	for _, l := range links {
		info := linkInfo(l.Attrs())
		if m := l.Attrs().MasterIndex; m != 0 {
			info.Master = names[m]
		}
		out = append(out, info)
	}
	return out, nil
}

// LinkIn implements LinkInspector: the namespace opened by its path, a
// route netlink socket made in it, the device found by name with its
// addresses of every family, scope global and link. A path that is gone,
// or no longer a network namespace (unmounted), wraps os.ErrNotExist.
func (hostLinks) LinkIn(nsPath, name string) (host.LinkInfo, bool, error) {
	ns, err := openNetns(nsPath)
	if err != nil {
		return host.LinkInfo{}, false, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return host.LinkInfo{}, false, fmt.Errorf("netns %s: opening rtnetlink there: %w", nsPath, err)
	}
	defer h.Close()
	link, err := h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return host.LinkInfo{}, false, nil
	case err != nil:
		return host.LinkInfo{}, false, fmt.Errorf("netns %s: looking up %s: %w", nsPath, name, err)
	}
	addrs, err := retryInterrupted(func() ([]netlink.Addr, error) { return h.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return host.LinkInfo{}, false, fmt.Errorf("netns %s: the addresses of %s: %w", nsPath, name, err)
	}
	info := linkInfo(link.Attrs())
	if m := link.Attrs().MasterIndex; m != 0 {
		if master, err := h.LinkByIndex(m); err == nil {
			info.Master = master.Attrs().Name
		}
	}
	for _, a := range addrs {
		if a.Scope != unix.RT_SCOPE_UNIVERSE && a.Scope != unix.RT_SCOPE_LINK {
			continue
		}
		if p, ok := prefixOf(a.IPNet); ok {
			info.Addrs = append(info.Addrs, p)
		}
	}
	return info, true, nil
}

// openNetns opens the network namespace mounted at path. A path that is
// there but holds no namespace (its mount is gone) is refused as gone:
// joining it would fail with EINVAL.
func openNetns(path string) (netns.NsHandle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return netns.None(), fmt.Errorf("netns %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(ns), &fs); err != nil {
		ns.Close()
		return netns.None(), fmt.Errorf("netns %s: %w", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC && fs.Type != unix.PROC_SUPER_MAGIC {
		ns.Close()
		return netns.None(), fmt.Errorf("netns %s: not a network namespace (unmounted?): %w", path, os.ErrNotExist)
	}
	return ns, nil
}

// linkInfo is what a drift check reads of a device, its master aside.
func linkInfo(a *netlink.LinkAttrs) host.LinkInfo {
	info := host.LinkInfo{Name: a.Name, Up: a.Flags&net.FlagUp != 0}
	if len(a.HardwareAddr) > 0 {
		info.MAC = a.HardwareAddr.String()
	}
	return info
}

// prefixOf is an address with its prefix length.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(addr.Unmap(), ones), true
}

// retryInterrupted runs a dump again while a change interrupted it.
func retryInterrupted[T any](dump func() ([]T, error)) ([]T, error) {
	for attempt := 1; ; attempt++ {
		out, err := dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || attempt == dumpAttempts {
			return out, err
		}
	}
}
