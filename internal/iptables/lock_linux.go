package iptables

import (
	"bufio"
	"os"

	"golang.org/x/sys/unix"
)

// lockHolder returns the pid holding an exclusive flock on path, as
// /proc/locks lists it; false when none does or it cannot be told. It only
// reads: cninet never takes the lock itself.
func lockHolder(path string) (int, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, false
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return flockHolder(bufio.NewScanner(f), unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
}
