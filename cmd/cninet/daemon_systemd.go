package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// systemd's service protocols the daemon speaks, without a library: the
// readiness notification (Type=notify) and socket activation
// (cninet.socket). Both are a few lines of the documented wire format:
// sd_notify(3) and sd_listen_fds(3).

// listenFDsStart is the first file descriptor systemd passes (SD_LISTEN_FDS_START).
const listenFDsStart = 3

// activatedListener returns the listening socket systemd passed this
// process (LISTEN_PID is ours, LISTEN_FDS at least 1: fd 3), or nil when
// none was passed. The variables are unset so that no child (a plugin)
// takes the socket for its own. A passed fd that is not a listening unix
// socket is an error naming it.
func activatedListener() (net.Listener, error) {
	pid, fds := os.Getenv("LISTEN_PID"), os.Getenv("LISTEN_FDS")
	if pid == "" || fds == "" {
		return nil, nil
	}
	defer func() {
		os.Unsetenv("LISTEN_PID")
		os.Unsetenv("LISTEN_FDS")
		os.Unsetenv("LISTEN_FDNAMES")
	}()
	if pid != strconv.Itoa(os.Getpid()) {
		return nil, nil // meant for another process
	}
	n, err := strconv.Atoi(fds)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("socket activation: LISTEN_FDS=%q, want a count of at least 1", fds)
	}
	f := os.NewFile(listenFDsStart, "LISTEN_FD_3")
	defer f.Close() // FileListener dups it
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("socket activation: fd %d: %w", listenFDsStart, err)
	}
	if _, ok := l.(*net.UnixListener); !ok {
		l.Close()
		return nil, fmt.Errorf("socket activation: fd %d is a %s socket, want a unix stream socket (ListenStream= a path)", listenFDsStart, l.Addr().Network())
	}
	return l, nil
}

// sdNotify sends state (e.g. "READY=1") to the service manager's
// $NOTIFY_SOCKET; without one (not run by systemd with Type=notify) it
// does nothing. An address starting with '@' is in the abstract
// namespace.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return fmt.Errorf("NOTIFY_SOCKET=%q, want a path or an abstract address (@...)", addr)
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notifying the service manager: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notifying the service manager: %w", err)
	}
	return nil
}
