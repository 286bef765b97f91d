package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// CheckNetNS fails when path is not a network namespace: it does not
// exist, or it is some other file (a regular file, another kind of
// namespace). No plugin could attach it, and retrying cannot make it
// one. The error says which, keeping the cause; the caller adds what
// that means for its operation.
func CheckNetNS(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s does not exist (want the path of a network namespace, such as /run/netns/NAME or /proc/PID/ns/net): %w",
			path, err)
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	kind, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("%s is not a namespace file (want a network namespace): %w", path, err)
	}
	if kind != unix.CLONE_NEWNET {
		return fmt.Errorf("%s is a namespace of another kind (type %#x), want a network namespace", path, kind)
	}
	return nil
}

// Inode returns the inode of the network namespace at path, or 0 when
// path is no network namespace (empty, gone, another file).
func Inode(path string) uint64 {
	if path == "" || CheckNetNS(path) != nil {
		return 0
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// StillHolds reports whether the namespace at path is still the one
// an attachment was made in — the same namespace (inode), whose interface
// ifName holds one of the addresses the attachment was given — so that a
// DEL may enter it. A path can be reused: another workload's namespace
// mounted there later is not the attachment's, and a DEL entering it
// would take that workload's interface.
func StillHolds(path string, inode uint64, ifName string, addrs []netip.Addr) bool {
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

// errNotNetns says a path is some other file than a network namespace.
var errNotNetns = errors.New("not a network namespace")

// netnsAt returns the inode of the network namespace at path; an error
// when there is none there (netnsAbsent) or it cannot be read.
func netnsAt(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if kind, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE); err != nil || kind != unix.CLONE_NEWNET {
		return 0, errNotNetns
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// netnsAbsent reports whether netnsAt's error says no network namespace
// is at the path: it does not exist, or is another kind of file.
func netnsAbsent(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotNetns) || errors.Is(err, unix.ENOTDIR)
}

// ownNetns is the inode of this process's network namespace (0 when
// unreadable): no workload's attachment lives in it.
var ownNetns = sync.OnceValue(func() uint64 {
	ino, _ := netnsAt("/proc/self/ns/net")
	return ino
})

// heldNetns returns the inodes of the network namespaces that this
// host's processes (every thread) are in, and that nsfs mounts of this
// mount namespace hold: a namespace among them lives, whatever path an
// attachment named it by.
func heldNetns() map[uint64]bool {
	held := map[uint64]bool{}
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/ns/net")
	for _, link := range tasks {
		if ino, ok := netnsLinkInode(link); ok {
			held[ino] = true
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			// "36 35 0:4 net:[4026532281] /run/netns/ns1 rw … - nsfs nsfs rw"
			fields := strings.Fields(sc.Text())
			if len(fields) > 4 && strings.HasPrefix(fields[3], "net:[") {
				if ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(fields[3], "net:["), "]"), 10, 64); err == nil {
					held[ino] = true
				}
			}
		}
	}
	return held
}

// netnsLinkInode reads a /proc/…/ns/net link ("net:[4026531840]").
func netnsLinkInode(link string) (uint64, bool) {
	target, err := os.Readlink(link)
	if err != nil || !strings.HasPrefix(target, "net:[") {
		return 0, false
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(target, "net:["), "]"), 10, 64)
	return ino, err == nil
}
