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

// readBuildInfo reads the module info of the ELF Go executable at path:
// its .go.buildinfo section holds a 32-byte header ("\xff Go buildinf:",
// then the pointer size and flags) followed, since Go 1.18, by two
// strings, each its length as a varint and its bytes: the Go version,
// then the module info.
func readBuildInfo(path string) (string, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", syscallError("open "+path, err)
	}
	defer syscall.Close(fd)
	read := func(off, n uint64) ([]byte, error) {
		if n > 1<<20 {
			return nil, errNoBuildInfo
		}
		b := make([]byte, n)
		got, err := syscall.Pread(fd, b, int64(off))
		if err != nil || uint64(got) != n {
			return nil, errNoBuildInfo
		}
		return b, nil
	}
	off, size, err := buildInfoSection(read)
	if err != nil {
		return "", err
	}
	data, err := read(off, size)
	if err != nil || len(data) < 32 || string(data[:14]) != "\xff Go buildinf:" || data[15]&0x2 == 0 {
		return "", errNoBuildInfo
	}
	_, rest, ok := varintString(data[32:])
	if !ok {
		return "", errNoBuildInfo
	}
	modinfo, _, ok := varintString(rest)
	if !ok {
		return "", errNoBuildInfo
	}
	// The module info is framed by 16 bytes on either side.
	if len(modinfo) < 33 {
		return "", nil
	}
	return modinfo[16 : len(modinfo)-16], nil
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

// buildInfoSection finds the file offset and size of the .go.buildinfo
// section of an ELF file (32- or 64-bit, either byte order).
func buildInfoSection(read func(off, n uint64) ([]byte, error)) (off, size uint64, err error) {
	h, err := read(0, 64)
	if err != nil || string(h[:4]) != "\x7fELF" {
		return 0, 0, errNoBuildInfo
	}
	wide, big := h[4] == 2, h[5] == 2
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
	// e_shoff, e_shentsize, e_shnum, e_shstrndx; then, in a section
	// header, sh_name, sh_offset and sh_size.
	shoff, entsize, num, strndx := word(h[32:], 4), word(h[46:], 2), word(h[48:], 2), word(h[50:], 2)
	nameAt, offAt, sizeAt, width := 0, 16, 20, 4
	if wide {
		shoff, entsize, num, strndx = word(h[40:], 8), word(h[58:], 2), word(h[60:], 2), word(h[62:], 2)
		offAt, sizeAt, width = 24, 32, 8
	}
	if num == 0 || strndx >= num || entsize < uint64(sizeAt+width) {
		return 0, 0, errNoBuildInfo
	}
	sections, err := read(shoff, num*entsize)
	if err != nil {
		return 0, 0, err
	}
	section := func(i uint64) (name, off, size uint64) {
		s := sections[i*entsize:]
		return word(s[nameAt:], 4), word(s[offAt:], width), word(s[sizeAt:], width)
	}
	_, strOff, strSize := section(strndx)
	names, err := read(strOff, strSize)
	if err != nil {
		return 0, 0, err
	}
	const want = ".go.buildinfo\x00"
	for i := range num {
		name, off, size := section(i)
		if name+uint64(len(want)) <= uint64(len(names)) && string(names[name:name+uint64(len(want))]) == want {
			return off, size, nil
		}
	}
	return 0, 0, errNoBuildInfo
}
