package thick

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUntrustedPath: a directory or file thick mode would trust (the
// socket's directory, the daemon's info file, which names the plugins a
// root shim runs) could be changed by a user other than root: it is owned
// by another user, or writable by group or others.
var ErrUntrustedPath = errors.New("untrusted path")

// trustedOwner says whether uid may own what thick mode trusts: root, or
// the process itself (a daemon and shim run by one unprivileged user, as
// in tests).
func trustedOwner(uid uint32) bool { return uid == 0 || int64(uid) == int64(os.Geteuid()) }

// PrepareSocketDir makes dir, the directory of the daemon's socket and
// info file, when it is missing: owned by this process (root), mode 0700,
// its missing parents likewise. It never changes a directory that exists;
// it refuses (ErrUntrustedPath, naming the directory, its owner and mode)
// one that another user owns or that group or others may write, and one
// inside a directory another user could replace it from (see
// CheckPrivateDir).
func PrepareSocketDir(dir string) error { return walkDir(dir, "socket directory", true) }

// CheckPrivateDir checks dir as PrepareSocketDir does, creating nothing:
// dir and every directory above it are owned by root (or this process's
// user); dir is writable by nobody else; a directory above it is writable
// by nobody else or sticky (as /tmp is: others cannot rename what root
// owns there). A symbolic link on the way must be owned likewise, and the
// directory it names passes the same rules. A missing directory is
// fs.ErrNotExist.
func CheckPrivateDir(dir, role string) error { return walkDir(dir, role, false) }

// walkDir checks dir's path from the root down, making missing
// directories (0700) when create is set.
func walkDir(dir, role string, create bool) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", role, dir, err)
	}
	parts := strings.Split(strings.TrimPrefix(dir, "/"), "/")
	path := "/"
	for i, part := range append([]string{""}, parts...) {
		path = filepath.Join(path, part)
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) && create {
			if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("creating %s %s: %w", role, path, err)
			}
			fi, err = os.Lstat(path) // whoever made it, it is judged as found
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", role, path, err)
		}
		what := role + " " + path
		if i < len(parts) {
			what = fmt.Sprintf("%s (above %s %s)", path, role, dir)
		}
		if err := judgeDir(path, fi, what, i == len(parts)); err != nil {
			return err
		}
	}
	return nil
}

// judgeDir applies the rules of CheckPrivateDir to one directory of the
// path, what in messages; last says whether it is the directory itself.
func judgeDir(path string, fi fs.FileInfo, what string, last bool) error {
	if err := judgeOwner(what, fi); err != nil {
		return err
	}
	if fi.Mode().Type() == fs.ModeSymlink {
		target, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return judgeDir(path, target, what+", the directory its symbolic link names,", last)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUntrustedPath, what)
	}
	mode := fi.Mode()
	if mode.Perm()&0o022 == 0 || (!last && mode&fs.ModeSticky != 0) {
		return nil
	}
	want := "want one writable by its owner only (e.g. a directory of its own such as /run/cninet)"
	if !last {
		want = "want it writable by its owner only, or sticky"
	}
	return fmt.Errorf("%w: %s has mode %04o, writable by group or others: %s", ErrUntrustedPath, what, octal(mode), want)
}

// judgeOwner wants fi owned by root or this process's user.
func judgeOwner(what string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: its owner cannot be told", ErrUntrustedPath, what)
	}
	if !trustedOwner(st.Uid) {
		return fmt.Errorf("%w: %s is owned by uid %d, want root (uid 0)", ErrUntrustedPath, what, st.Uid)
	}
	return nil
}

// octal is mode's permission bits as chmod writes them, the sticky,
// setgid and setuid bits included.
func octal(mode fs.FileMode) uint32 {
	bits := uint32(mode.Perm())
	for flag, bit := range map[fs.FileMode]uint32{fs.ModeSticky: 0o1000, fs.ModeSetgid: 0o2000, fs.ModeSetuid: 0o4000} {
		if mode&flag != 0 {
			bits |= bit
		}
	}
	return bits
}

// readTrustedFile reads path, at most limit bytes, when it is a regular
// file (not a symbolic link) owned by root or this process's user and
// writable by nobody else, in a directory CheckPrivateDir accepts. The
// file is judged by the descriptor it is read from, so it cannot be
// swapped between the check and the read.
func readTrustedFile(path, role string, limit int64) ([]byte, error) {
	if err := CheckPrivateDir(filepath.Dir(path), "directory of the "+role); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%w: %s %s is a symbolic link, want a regular file", ErrUntrustedPath, role, path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	what := role + " " + path
	if err := judgeOwner(what, fi); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrUntrustedPath, what)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o, writable by group or others: want it writable by root only", ErrUntrustedPath, what, octal(fi.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s exceeds %d bytes", ErrUntrustedPath, what, limit)
	}
	return b, nil
}
