package main

import (
	"errors"
	"io"
	"syscall"
	"time"
)

// unixConn is a connection to the daemon's unix socket, made and used
// with plain system calls (package net, with its poller and resolver,
// would be paid for at each of the shim's starts). Every call waits at
// most until the time it is given: the socket's send and receive
// timeouts are set to what is left before each call.
type unixConn struct{ fd int }

// timeoutError: a call on the connection reached its time.
type timeoutError struct{ op string }

func (e *timeoutError) Error() string { return e.op + ": i/o timeout" }

func syscallError(op string, err error) error { return errors.New(op + ": " + err.Error()) }

// dialUnix connects to the unix socket path, waiting at most until by
// (a listener whose queue is full makes connect wait).
func dialUnix(path string, by time.Time) (*unixConn, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, syscallError("socket", err)
	}
	c := &unixConn{fd: fd}
	for {
		if err = c.setTimeout(syscall.SO_SNDTIMEO, by, "dial unix "+path); err != nil {
			c.close()
			return nil, err
		}
		err = syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case err == syscall.EAGAIN:
		c.close()
		return nil, &timeoutError{op: "dial unix " + path}
	case err != nil:
		c.close()
		return nil, syscallError("dial unix "+path, err)
	}
	return c, nil
}

// setTimeout sets the socket option opt (SO_SNDTIMEO, SO_RCVTIMEO) to
// what is left before by; none left is a timeoutError of op.
func (c *unixConn) setTimeout(opt int, by time.Time, op string) error {
	left := time.Until(by)
	if left <= 0 {
		return &timeoutError{op: op}
	}
	tv := syscall.NsecToTimeval(left.Nanoseconds())
	if tv.Sec == 0 && tv.Usec == 0 {
		tv.Usec = 1 // zero would be no timeout at all
	}
	if err := syscall.SetsockoptTimeval(c.fd, syscall.SOL_SOCKET, opt, &tv); err != nil {
		return syscallError("setsockopt", err)
	}
	return nil
}

// write sends all of p by then.
func (c *unixConn) write(p []byte, by time.Time) error {
	for len(p) > 0 {
		if err := c.setTimeout(syscall.SO_SNDTIMEO, by, "write"); err != nil {
			return err
		}
		n, err := syscall.SendmsgN(c.fd, p, nil, nil, syscall.MSG_NOSIGNAL)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return &timeoutError{op: "write"}
		case err != nil:
			return syscallError("write", err)
		}
		p = p[n:]
	}
	return nil
}

// read reads what has come, waiting for something until by; io.EOF
// when the daemon closed the connection.
func (c *unixConn) read(p []byte, by time.Time) (int, error) {
	for {
		if err := c.setTimeout(syscall.SO_RCVTIMEO, by, "read"); err != nil {
			return 0, err
		}
		n, err := syscall.Read(c.fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, &timeoutError{op: "read"}
		case err != nil:
			return 0, syscallError("read", err)
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (c *unixConn) close() { syscall.Close(c.fd) }
