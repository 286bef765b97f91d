package workload

import (
	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// LoopbackUp reports whether the workload's lo is up; false when netns
// cannot be entered (empty, or gone).
func LoopbackUp(netns string) bool {
	up := false
	if netns == "" {
		return false
	}
	_ = ns.WithNetNSPath(netns, func(ns.NetNS) error {
		return withLoopback(func(fd int, ifr *unix.Ifreq) error {
			up = ifr.Uint16()&unix.IFF_UP != 0
			return nil
		})
	})
	return up
}

// SetLoopbackUp brings the workload's lo up again.
func SetLoopbackUp(netns string) error {
	return ns.WithNetNSPath(netns, func(ns.NetNS) error {
		return withLoopback(func(fd int, ifr *unix.Ifreq) error {
			ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
			return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
		})
	})
}

// withLoopback calls fn with a socket and lo's flags, in the current
// network namespace.
func withLoopback(fn func(fd int, ifr *unix.Ifreq) error) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	return fn(fd, ifr)
}
