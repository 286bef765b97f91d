package main

import (
	"strconv"
	"syscall"
	"unsafe"
)

// oPath is O_PATH (package syscall names it only on some architectures;
// its value is the same on every one cninet runs on).
const oPath = 0x200000

// maxSymlinks is how many symbolic links a path may pass through, as
// Linux allows.
const maxSymlinks = 40

// openExecutable opens the cninet the shim runs its DEL with, at path
// (absolute), as a descriptor to exec (O_PATH, O_CLOEXEC), once it has
// checked that nobody but root or the shim's own user could have put it
// there: the shim runs it as root. It walks the path itself, one
// element at a time, each opened in the directory opened before (so
// nothing is looked up twice, and what runs is what was checked), and
// follows symbolic links as the kernel would. It wants:
//
//   - every directory passed through owned by root or the shim's user,
//     and not writable by group or others unless sticky (like /tmp:
//     there, others can add entries but not rename or remove ours);
//   - every entry passed through (directory, symbolic link, the file)
//     owned by root or the shim's user: in a sticky directory, one
//     another user made is theirs to change;
//   - the file regular, executable, and not writable by group or others.
func openExecutable(path string) (int, error) {
	w := &pathWalk{euid: uint32(syscall.Geteuid()), dir: -1}
	defer w.closeDir()
	if err := w.openRoot(); err != nil {
		return -1, err
	}
	names := splitPath(path)
	for links := 0; len(names) > 0; {
		name := names[0]
		names = names[1:]
		fd, st, err := w.open(name)
		if err != nil {
			return -1, err
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			target, err := readlinkFd(fd)
			syscall.Close(fd)
			if links++; err == nil && links > maxSymlinks {
				err = errorString("more than " + strconv.Itoa(maxSymlinks) + " symbolic links")
			}
			if err != nil {
				return -1, errorString(w.here(name) + ": " + err.Error())
			}
			if target != "" && target[0] == '/' {
				if err := w.openRoot(); err != nil {
					return -1, err
				}
			}
			names = append(splitPath(target), names...)
		case syscall.S_IFDIR:
			if err := w.enter(name, fd, &st); err != nil {
				return -1, err
			}
		default:
			if len(names) > 0 {
				syscall.Close(fd)
				return -1, errorString(w.here(name) + " is not a directory")
			}
			if err := checkExecutable(w.here(name), &st); err != nil {
				syscall.Close(fd)
				return -1, err
			}
			return fd, nil
		}
	}
	return -1, errorString(w.at + "/ is a directory, want the cninet executable")
}

// pathWalk is a walk down a path: the directory reached, opened and
// checked.
type pathWalk struct {
	euid uint32
	dir  int
	// at is the directory's path as walked ("" for /), for messages.
	at string
}

func (w *pathWalk) here(name string) string { return w.at + "/" + name }

// openRoot starts (again) at /.
func (w *pathWalk) openRoot() error {
	fd, err := syscall.Open("/", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return syscallError("open /", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return syscallError("stat /", err)
	}
	w.closeDir()
	w.dir, w.at = fd, ""
	if err := w.checkOwner("/", &st); err != nil {
		return err
	}
	return checkDir("/", &st)
}

// open opens name in the directory reached, not following a symbolic
// link, and wants it owned by root or the shim's user.
func (w *pathWalk) open(name string) (int, syscall.Stat_t, error) {
	var st syscall.Stat_t
	fd, err := syscall.Openat(w.dir, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, syscallError("open "+w.here(name), err)
	}
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, st, syscallError("stat "+w.here(name), err)
	}
	if err := w.checkOwner(w.here(name), &st); err != nil {
		syscall.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// enter makes the directory name, open at fd, the one reached.
func (w *pathWalk) enter(name string, fd int, st *syscall.Stat_t) error {
	at := w.here(name)
	if name == ".." {
		at = w.at[:max(lastSlash(w.at), 0)]
	}
	w.closeDir()
	w.dir, w.at = fd, at
	return checkDir(orRoot(at), st)
}

func (w *pathWalk) closeDir() {
	if w.dir >= 0 {
		syscall.Close(w.dir)
	}
	w.dir = -1
}

func orRoot(at string) string {
	if at == "" {
		return "/"
	}
	return at
}

// checkOwner wants what is at path owned by root or the shim's user.
func (w *pathWalk) checkOwner(path string, st *syscall.Stat_t) error {
	if st.Uid != 0 && st.Uid != w.euid {
		return errorString(path + " is owned by uid " + strconv.FormatUint(uint64(st.Uid), 10) + ", want root")
	}
	return nil
}

// checkDir wants the directory at path writable by its owner alone, or
// sticky.
func checkDir(path string, st *syscall.Stat_t) error {
	if st.Mode&0o022 != 0 && st.Mode&syscall.S_ISVTX == 0 {
		return errorString("directory " + path + " is writable by group or others and not sticky (mode " + modeString(st) + ")")
	}
	return nil
}

// checkExecutable wants the file at path regular, executable, and
// writable by its owner alone.
func checkExecutable(path string, st *syscall.Stat_t) error {
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return errorString(path + " is not a regular file")
	case st.Mode&0o111 == 0:
		return errorString(path + " is not executable")
	case st.Mode&0o022 != 0:
		return errorString(path + " is writable by group or others (mode " + modeString(st) + ")")
	}
	return nil
}

func modeString(st *syscall.Stat_t) string {
	return strconv.FormatUint(uint64(st.Mode&0o7777), 8)
}

// splitPath is the elements of path, without empty ones and ".".
func splitPath(path string) []string {
	var names []string
	for start, i := 0, 0; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		if name := path[start:i]; name != "" && name != "." {
			names = append(names, name)
		}
		start = i + 1
	}
	return names
}

// readlinkFd is the target of the symbolic link open (O_PATH) at fd.
func readlinkFd(fd int) (string, error) {
	empty := [1]byte{} // "": the link fd itself
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, _, errno := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])),
			uintptr(unsafe.Pointer(&buf[0])), uintptr(size), 0, 0)
		if errno != 0 {
			return "", syscallError("readlink", errno)
		}
		if int(n) < size {
			return string(buf[:n]), nil
		}
	}
}
