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

	"github.com/seed1280861d/cninet/internal/hostwork"
)

// host-local keeps one file per reserved address in <dataDir>/<network>/,
// named by the address and holding "ID\r\nIFNAME" (older releases: just
// the id), next to "lock" and "last_reserved_ip.N". Its DEL removes them;
// a crash, or a DEL that never ran, leaves them, and the address stays
// taken until they go. A reservation names exactly one attachment (its
// network is the directory's), so it proves and it holds.

type hostLocal struct{}

// DefaultHostLocalDataDir is where host-local keeps its reservations
// unless its configuration names another dataDir.
const DefaultHostLocalDataDir = "/var/lib/cni/networks"

// configure reads the reservation directories of every plugin that
// delegates to host-local.
func (hostLocal) configure(n *Network) {
	type ipamConf struct {
		IPAM struct {
			Type    string `json:"type"`
			DataDir string `json:"dataDir"`
		} `json:"ipam"`
	}
	for _, conf := range configs[ipamConf](*n, "") {
		if conf.IPAM.Type == "host-local" {
			n.IPAMDirs = appendOnce(n.IPAMDirs, filepath.Join(orDefault(conf.IPAM.DataDir, DefaultHostLocalDataDir), n.Name))
		}
	}
}

// reservation is one host-local reservation file.
type reservation struct {
	net, dir, path, id string
	addr               netip.Addr
}

func (r reservation) att() Attachment { return Attachment{r.net, r.id} }

func (hostLocal) prove(v *view, set attSet) []claim {
	return claimsOfFiles(v, set, func(f hostFiles) []reservation { return f.reservations },
		func(r reservation) []netip.Addr { return []netip.Addr{r.addr} })
}

// holders reads, for each address, the one file in each known network's
// IPAM directories that would give it to somebody.
func (hostLocal) holders(v *view, set attSet, addrs addrSet) []claim {
	var out []claim
	if v.whole { // every reservation was read already
		for _, r := range v.files.reservations {
			if addrs[r.addr] && !set[r.att()] {
				out = append(out, claim{r.addr, r.att()})
			}
		}
		return out
	}
	for _, n := range sortedNets(v.nets) {
		for _, dir := range n.IPAMDirs {
			for _, addr := range addrs.all() {
				id, err := reservationHolder(filepath.Join(dir, addr.String()))
				if err == nil && !set[Attachment{n.Name, id}] {
					out = append(out, claim{addr, Attachment{n.Name, id}})
				}
			}
		}
	}
	return out
}

func (hostLocal) plan(v *view, set attSet, _ *evidence, p *plan) {
	for _, r := range v.files.reservations {
		if set[r.att()] {
			p.files = append(p.files, fileChange{kind: KindReservation, att: r.att(), path: r.path, lockDir: r.dir})
		}
	}
}

func (hostLocal) discover(v *view, found attSet) {
	for _, r := range v.files.reservations {
		found[r.att()] = true
	}
}

// reservedBySet reports whether addr is reserved, in its own network's
// IPAM directory, for an attachment of the set: host-local then has given
// it to nobody else in that network.
func reservedBySet(v *view, set attSet, addr netip.Addr) bool {
	for _, f := range []hostFiles{v.prior, v.files} {
		for _, r := range f.reservations {
			if r.addr == addr && set[r.att()] {
				if id, err := reservationHolder(r.path); err == nil && id == r.id {
					return true
				}
			}
		}
	}
	return false
}

// contested returns the addresses of addrs whose holders a Teardown must
// look for beyond host-local's reservations: all but those host-local
// reserved for the set itself (it gives an address to one attachment of a
// network at a time, and another network's reservation is read anyway).
// What is left costs listings and dumps that grow with the host, so a
// clean Teardown, whose attachment's reservation still stands before its
// DEL, pays for none. A GC asks about all.
func contested(v *view, set attSet, addrs addrSet) addrSet {
	if v.whole {
		return addrs
	}
	out := addrSet{}
	for a := range addrs {
		if !reservedBySet(v, set, a) {
			out[a] = true
		}
	}
	return out
}

// readAllReservations lists the reservation files of n.
func readAllReservations(v *view, n Network) []reservation {
	end := v.meter.Begin(hostwork.File, "reservations of "+n.Name, false)
	defer end(0, 0)
	var all []reservation
	for _, dir := range n.IPAMDirs {
		rs, err := readReservations(n.Name, dir)
		v.errs.add(err)
		all = append(all, rs...)
	}
	return all
}

// readReservations lists the reservation files in dir.
func readReservations(network, dir string) ([]reservation, error) {
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
		r, err := readReservation(network, dir, addr)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errNoHolder) {
				errs = append(errs, err)
			}
			continue
		}
		rs = append(rs, r)
	}
	return rs, errors.Join(errs...)
}

// errNoHolder says a reservation file names no valid container id (say,
// it was cut short by a crash): it is nobody's provably, and left alone.
var errNoHolder = errors.New("reservation names no valid container id")

// readReservation reads the reservation of addr in dir.
func readReservation(network, dir string, addr netip.Addr) (reservation, error) {
	path := filepath.Join(dir, addr.String())
	id, err := reservationHolder(path)
	if err != nil {
		return reservation{}, err
	}
	if !IsContainerID(id) {
		return reservation{}, fmt.Errorf("%s: %w", path, errNoHolder)
	}
	return reservation{net: network, dir: dir, path: path, id: id, addr: addr.Unmap()}, nil
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

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// expect: for each address of the result, its reservation in the
// network's IPAM directory, naming the attachment. A missing one cninet
// writes again as host-local does (restore.go); one that names another
// holder means host-local gave the address away: it cannot be taken back
// while that workload lives.
func (hostLocal) expect(_ *liveView, a *Live, h *Health) {
	if len(a.Net.IPAMDirs) == 0 {
		return
	}
	for _, p := range a.allAddrs() {
		path, holder, err := reservationOf(a.Net, p.Addr())
		switch {
		case err != nil:
			h.unknown(err)
		case holder == "":
			h.miss(Missing{Plugin: "host-local", Kind: KindReservation, Backend: "files", Detail: path, Restore: ByCninet})
		case holder != a.ID:
			h.miss(Missing{Plugin: "host-local", Kind: KindReservation, Backend: "files", Detail: path, Restore: NotInPlace,
				Why: fmt.Sprintf("host-local reserved %s for %s since", p.Addr(), holder)})
		}
	}
}

// reservationOf returns where n's reservation of addr is (or would be,
// in its first IPAM directory) and whom it names ("" when there is none).
func reservationOf(n Network, addr netip.Addr) (path, holder string, err error) {
	for _, dir := range n.IPAMDirs {
		p := filepath.Join(dir, addr.String())
		id, err := reservationHolder(p)
		switch {
		case err == nil:
			return p, id, nil
		case !errors.Is(err, os.ErrNotExist):
			return p, "", fmt.Errorf("reading host-local's reservation %s: %w", p, err)
		}
	}
	return filepath.Join(n.IPAMDirs[0], addr.String()), "", nil
}
