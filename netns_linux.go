package cninet

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// checkNetNS fails, wrapping ErrNoNetNS, when path is not a network
// namespace: it does not exist, or it is some other file (a regular
// file, another kind of namespace). No plugin could attach it, and
// retrying cannot make it one. The caller adds what that means for its
// operation (ErrInvalidArgument for Setup, ErrCheckFailed for Check).
func checkNetNS(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s does not exist (want the path of a network namespace, such as /run/netns/NAME or /proc/PID/ns/net)",
			ErrNoNetNS, path)
	}
	if err != nil {
		return fmt.Errorf("%w: opening %s: %w", ErrNoNetNS, path, err)
	}
	defer f.Close()
	kind, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("%w: %s is not a namespace file (want a network namespace): %w", ErrNoNetNS, path, err)
	}
	if kind != unix.CLONE_NEWNET {
		return fmt.Errorf("%w: %s is a namespace of another kind (type %#x), want a network namespace", ErrNoNetNS, path, kind)
	}
	return nil
}

// netnsInode returns the inode of the network namespace at path, or 0
// when path is no network namespace (empty, gone, another file).
func netnsInode(path string) uint64 {
	if path == "" || checkNetNS(path) != nil {
		return 0
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// netnsStillHolds reports whether the namespace at path is still the one
// an attachment was made in — the same namespace (inode), whose interface
// ifName holds one of the addresses the attachment was given — so that a
// DEL may enter it. A path can be reused: another workload's namespace
// mounted there later is not the attachment's, and a DEL entering it
// would take that workload's interface.
func netnsStillHolds(path string, inode uint64, ifName string, addrs []netip.Addr) bool {
	if path == "" || inode == 0 || ifName == "" || len(addrs) == 0 {
		return false
	}
	handle, err := netns.GetFromPath(path)
	if err != nil {
		return false
	}
	defer handle.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(handle), &st); err != nil || st.Ino != inode {
		return false
	}
	if kind, err := unix.IoctlRetInt(int(handle), unix.NS_GET_NSTYPE); err != nil || kind != unix.CLONE_NEWNET {
		return false
	}
	nl, err := netlink.NewHandleAt(handle)
	if err != nil {
		return false
	}
	defer nl.Close()
	link, err := nl.LinkByName(ifName)
	if err != nil {
		return false
	}
	held, err := nl.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return false
	}
	for _, a := range held {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && slices.Contains(addrs, ip.Unmap()) {
			return true
		}
	}
	return false
}
