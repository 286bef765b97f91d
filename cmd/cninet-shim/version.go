package main

import (
	"strings"
	"syscall"
)

// cninetVersion is cninet's version as the Go toolchain recorded it in
// this executable, as buildinfo.Version reads it in cninet's other
// binaries: read from the executable file's build info section, since
// runtime/debug (with os, fmt and reflect behind it) would be paid for
// at each of the shim's starts. "(devel)" when there is none.
func cninetVersion() string {
	info, err := readBuildInfo("/proc/self/exe")
	if err != nil {
		return devel
	}
	return versionIn(info)
}

// devel is what buildinfo.Version says of a build that recorded no
// version.
const devel = "(devel)"

// cninetModule is cninet's module path (buildinfo.Module, which the
// shim does not link).
const cninetModule = "github.com/seed1280861d/cninet"

// versionIn finds cninet's version in a build's module info: the main
// module's when it is cninet, else the dependency's (replaced: the
// replacement's).
func versionIn(modinfo string) string {
	dep, found := "", false
	for rest := modinfo; rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		kind, line, _ := strings.Cut(line, "\t")
		path, line, _ := strings.Cut(line, "\t")
		version, _, _ := strings.Cut(line, "\t")
		switch {
		case found && kind == "=>": // the dependency's replacement
			return orDevel(version)
		case found:
			return orDevel(dep)
		case kind == "mod" && path == cninetModule:
			return orDevel(version)
		case kind == "dep" && path == cninetModule:
			dep, found = version, true
		}
	}
	return orDevel(dep)
}

// orDevel is the version v, or devel when there is none.
func orDevel(v string) string {
	if v == "" {
		return devel
	}
	return v
}

// errNoBuildInfo: the file is no ELF Go executable with build info.
var errNoBuildInfo = errorString("no Go build info")

// buildInfoMagic starts the Go build info blob: "\xff Go buildinf:",
// then the pointer size and flags, then (flags bit 2, Go 1.18 and later)
// two strings, each its length as a varint and its bytes: the Go
// version, then the module info, framed by 16 bytes on either side.
const buildInfoMagic = "\xff Go buildinf:"

// readBuildInfo reads the module info of the ELF Go executable at path,
// as debug/buildinfo finds it without section headers: in the first
// writable, not executable, loadable segment, at a 16-byte boundary
// (the Go linker puts it at the segment's start). One read of the file's
// head (the ELF header and the program headers), one of the segment's.
func readBuildInfo(path string) (string, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", syscallError("open "+path, err)
	}
	defer syscall.Close(fd)
	read := func(off uint64, size int) ([]byte, error) {
		buf := make([]byte, size)
		n, err := syscall.Pread(fd, buf, int64(off))
		if err != nil || n < 64 {
			return nil, errNoBuildInfo
		}
		return buf[:n], nil
	}
	head, err := read(0, 4096)
	if err != nil {
		return "", err
	}
	off, err := dataSegment(head)
	if err != nil {
		return "", err
	}
	for size := 4096; ; size *= 16 {
		data, err := read(off, size)
		if err != nil {
			return "", err
		}
		modinfo, cut, err := buildInfoIn(data)
		if !cut || len(data) < size || size >= 1<<20 {
			return modinfo, err
		}
	}
}

// buildInfoIn finds the build info blob at a 16-byte boundary of data
// and returns its module info; cut says the blob goes on past data.
func buildInfoIn(data []byte) (modinfo string, cut bool, err error) {
	for at := 0; at+32 <= len(data); at += 16 {
		if string(data[at:at+len(buildInfoMagic)]) != buildInfoMagic {
			continue
		}
		if data[at+15]&0x2 == 0 {
			return "", false, errNoBuildInfo // a Go before 1.18
		}
		_, rest, ok := varintString(data[at+32:])
		if ok {
			modinfo, _, ok = varintString(rest)
		}
		switch {
		case !ok:
			return "", true, errNoBuildInfo
		case len(modinfo) < 33:
			return "", false, nil
		}
		return modinfo[16 : len(modinfo)-16], false, nil
	}
	return "", false, errNoBuildInfo
}

// varintString reads a string written as its length (an unsigned
// varint) and its bytes.
func varintString(b []byte) (s string, rest []byte, ok bool) {
	var n uint64
	for i, shift := 0, uint(0); i < len(b) && shift < 64; i, shift = i+1, shift+7 {
		n |= uint64(b[i]&0x7f) << shift
		if b[i] < 0x80 {
			b = b[i+1:]
			if n > uint64(len(b)) {
				return "", nil, false
			}
			return string(b[:n]), b[n:], true
		}
	}
	return "", nil, false
}

// dataSegment is the file offset of the first loadable segment of an
// ELF file (32- or 64-bit, either byte order) that is writable and not
// executable, from the file's head: the ELF header and the program
// headers after it.
func dataSegment(head []byte) (uint64, error) {
	if string(head[:4]) != "\x7fELF" {
		return 0, errNoBuildInfo
	}
	wide, big := head[4] == 2, head[5] == 2
	word := func(b []byte, n int) uint64 {
		var v uint64
		for i := range n {
			if big {
				v = v<<8 | uint64(b[i])
			} else {
				v |= uint64(b[i]) << (8 * i)
			}
		}
		return v
	}
	// e_phoff, e_phentsize, e_phnum; then, in a program header, p_type,
	// p_flags and p_offset.
	phoff, entsize, num := word(head[28:], 4), word(head[42:], 2), word(head[44:], 2)
	flagsAt, offAt, width := 24, 4, 4
	if wide {
		phoff, entsize, num = word(head[32:], 8), word(head[54:], 2), word(head[56:], 2)
		flagsAt, offAt, width = 4, 8, 8
	}
	const ptLoad, pfX, pfW = 1, 1, 2
	for i := range num {
		at := phoff + i*entsize
		if at+entsize > uint64(len(head)) || entsize < uint64(offAt+width) {
			return 0, errNoBuildInfo
		}
		ph := head[at:]
		if flags := word(ph[flagsAt:], 4); word(ph, 4) == ptLoad && flags&pfW != 0 && flags&pfX == 0 {
			return word(ph[offAt:], width), nil
		}
	}
	return 0, errNoBuildInfo
}
