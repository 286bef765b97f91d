package main

import (
	"io"
	"syscall"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

func main() {
	start := now()
	stdout := &fdWriter{fd: 1}
	s := newShim(stdout)
	s.version = cninetVersion()
	s.times = startTimes(getenv(thickwire.ShimTimesEnv), start)
	err := pluginMain(getenv, &fdReader{fd: 0}, stdout, &fdWriter{fd: 2}, s.commands(), s.version)
	code := 0
	if err != nil {
		stdout.Write(err.encode())
		code = 1
	}
	s.times.write(getenv("CNI_COMMAND"), getenv("CNI_CONTAINERID"), getenv("CNI_IFNAME"), code)
	syscall.Exit(code)
}

func getenv(key string) string {
	v, _ := syscall.Getenv(key)
	return v
}

// about is what the shim prints to stderr when run without CNI_COMMAND.
func about(version string) string {
	return "cninet-shim " + version + ": forwards CNI requests to the cninet daemon"
}

// versionAnswer is the shim's answer to CNI VERSION: the CNI versions it
// speaks (the newest of them, as its "cniVersion"), and cninet's version
// as "cninetVersion", which the CNI spec lets a plugin add.
func versionAnswer(version string) []byte {
	b := appendString([]byte(`{"cniVersion":`), thickwire.CNIVersions[len(thickwire.CNIVersions)-1])
	b = appendString(append(b, `,"cninetVersion":`...), version)
	b = append(b, `,"supportedVersions":[`...)
	for i, v := range thickwire.CNIVersions {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, v)
	}
	return append(b, "]}\n"...)
}

// fdReader and fdWriter read and write a file descriptor with plain
// system calls (package os would be paid for at each start).
type fdReader struct{ fd int }

func (r *fdReader) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(r.fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, syscallError("read", err)
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

type fdWriter struct{ fd int }

func (w *fdWriter) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n, err := syscall.Write(w.fd, p[written:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return written, syscallError("write", err)
		}
		written += n
	}
	return written, nil
}
