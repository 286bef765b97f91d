package footprint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// host-local keeps one file per reserved address in <dataDir>/<network>/,
// named by the address and holding "ID\r\nIFNAME" (older releases: just
// the id), next to "lock" and "last_reserved_ip.N". Its DEL removes them;
// a crash, or a DEL that never ran, leaves them, and the address stays
// taken until they go.

// reservation is one host-local reservation file.
type reservation struct {
	dir, path, id string
	addr          netip.Addr
}

// readReservations lists the reservation files in dir.
func readReservations(dir string) ([]reservation, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading IPAM directory: %w", err)
	}
	var rs []reservation
	var errs []error
	for _, e := range entries {
		addr, err := netip.ParseAddr(e.Name())
		if err != nil || e.IsDir() {
			continue // lock, last_reserved_ip.N and anything else not a reservation
		}
		r, err := readReservation(dir, addr)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		rs = append(rs, r)
	}
	return rs, errors.Join(errs...)
}

// readReservation reads the reservation of addr in dir.
func readReservation(dir string, addr netip.Addr) (reservation, error) {
	path := filepath.Join(dir, addr.String())
	id, err := reservationHolder(path)
	if err != nil {
		return reservation{}, err
	}
	return reservation{dir: dir, path: path, id: id, addr: addr.Unmap()}, nil
}

// reservationHolder returns the container id a reservation file names.
func reservationHolder(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// A small reader: a GC sweep reads every reservation several times.
	line, err := bufio.NewReaderSize(f, 64).ReadString('\n')
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return strings.TrimRight(line, "\r\n"), err
}

// heldByOther reports whether a reservation in one of dirs gives addr to
// an attachment outside ids right now. It reads the one file that would
// say so in each directory.
func heldByOther(dirs []string, addr netip.Addr, ids idSet) bool {
	for _, dir := range dirs {
		holder, err := reservationHolder(filepath.Join(dir, addr.String()))
		if err == nil && !ids[holder] {
			return true
		}
	}
	return false
}

// removeReservations removes rs, all in dir, under host-local's own lock,
// each re-read first: between the scan and now host-local may have handed
// the address to somebody else.
func (c *Cleaner) removeReservations(dir string, rs []reservation) {
	unlock, err := lockDir(dir)
	if err != nil {
		c.fail(fmt.Errorf("locking IPAM directory %s: %w", dir, err))
		return
	}
	defer unlock()
	for _, r := range rs {
		if id, err := reservationHolder(r.path); err != nil || id != r.id {
			continue // released or re-reserved meanwhile: not ours any more
		}
		if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.fail(fmt.Errorf("removing reservation: %w", err))
			continue
		}
		c.noteRemoved(KindReservation, r.id, r.path)
	}
}
