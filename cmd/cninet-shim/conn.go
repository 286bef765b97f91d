package main

import (
	"io"
	"syscall"
	"time"
	"unsafe"
)

// stream is a conversation over file descriptors made and used with
// plain system calls (package net, with its poller and resolver, and
// os/exec would be paid for at each of the shim's starts): the
// connection to the daemon's unix socket, or the pipes to and from
// `cninet shim-del`. Both ends are non-blocking; every read waits, with
// poll, at most until the time it is given.
//
// What is to be sent (pending) goes out while the shim waits to read,
// never before: a peer may answer before it has read everything (the
// daemon acknowledges a request once it has its head, and reads the body
// only when a slot is free; it refuses a body too big without reading
// it all), and a shim blocked in write() would miss that answer.
type stream struct {
	rfd, wfd int
	// socket: wfd is a socket (sent with MSG_NOSIGNAL).
	socket bool
	// pending is what is still to be sent.
	pending []byte
	// closeWhenSent closes wfd once pending is sent: the end of the
	// input of a process.
	closeWhenSent bool
	// sendErr is why sending stopped before pending was all sent (the
	// peer closed its end); nil while it goes on.
	sendErr error
	// sent, when set, is called once pending has all been sent.
	sent func()
}

// timeoutError: a call on the connection reached its time.
type timeoutError struct{ op string }

func (e *timeoutError) Error() string { return e.op + ": i/o timeout" }

// syscallError is err (an errno) of the system call op, for messages;
// errors.Is still finds the errno (syscall.ENOENT …).
func syscallError(op string, err error) error { return &opError{op: op, err: err} }

type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return e.op + ": " + e.err.Error() }

func (e *opError) Unwrap() error { return e.err }

// dialUnix connects to the unix socket path, waiting at most until by
// (a listener whose queue is full makes connect wait: a blocking connect
// bounded by the socket's send timeout, since a non-blocking one on a
// unix socket fails at once instead of waiting).
func dialUnix(path string, by time.Time) (*stream, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, syscallError("socket", err)
	}
	c := &stream{rfd: fd, wfd: fd, socket: true}
	for {
		if err = setSendTimeout(fd, by, "dial unix "+path); err != nil {
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
		err = &timeoutError{op: "dial unix " + path}
	case err != nil:
		err = syscallError("dial unix "+path, err)
	default:
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// setSendTimeout sets the socket's SO_SNDTIMEO to what is left before
// by; none left is a timeoutError of op.
func setSendTimeout(fd int, by time.Time, op string) error {
	left := time.Until(by)
	if left <= 0 {
		return &timeoutError{op: op}
	}
	tv := syscall.NsecToTimeval(left.Nanoseconds())
	if tv.Sec == 0 && tv.Usec == 0 {
		tv.Usec = 1 // zero would be no timeout at all
	}
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_SNDTIMEO, &tv); err != nil {
		return syscallError("setsockopt", err)
	}
	return nil
}

// read reads what has come, sending what is pending meanwhile, and waits
// for something until by; io.EOF when the peer closed its end. It always
// tries once: what came before by is read even when by has passed.
func (c *stream) read(p []byte, by time.Time) (int, error) {
	for {
		n, err := syscall.Read(c.rfd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN: // nothing yet
		case err != nil:
			return 0, syscallError("read", err)
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		default:
			return n, nil
		}
		c.send()
		if err := c.wait(by); err != nil {
			return 0, err
		}
	}
}

// send sends what the peer takes now of pending; once it is all sent
// (or the peer takes no more), sending is done.
func (c *stream) send() {
	for len(c.pending) > 0 {
		var n int
		var err error
		if c.socket {
			n, err = syscall.SendmsgN(c.wfd, c.pending, nil, nil, syscall.MSG_NOSIGNAL)
		} else {
			n, err = syscall.Write(c.wfd, c.pending)
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return
		case err != nil:
			c.sendErr = syscallError("write", err)
			c.stopSending()
			return
		}
		if c.pending = c.pending[n:]; len(c.pending) == 0 && c.sent != nil {
			c.sent()
		}
	}
	c.closeSending()
}

// stopSending drops what is still pending: the peer has answered, and
// reads no more.
func (c *stream) stopSending() {
	c.pending = nil
	c.closeSending()
}

func (c *stream) closeSending() {
	if c.closeWhenSent && c.wfd >= 0 {
		syscall.Close(c.wfd)
		c.wfd = -1
	}
}

// pollFd is struct pollfd of poll(2).
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const (
	pollIn  = 0x1
	pollOut = 0x4
)

// wait waits until by for something to read, or for room to send what
// is pending; none left is a timeoutError.
func (c *stream) wait(by time.Time) error {
	left := time.Until(by)
	if left <= 0 {
		return &timeoutError{op: "read"}
	}
	fds := [2]pollFd{{fd: int32(c.rfd), events: pollIn}}
	n := 1
	switch {
	case len(c.pending) == 0:
	case c.wfd == c.rfd:
		fds[0].events |= pollOut
	default:
		fds[1] = pollFd{fd: int32(c.wfd), events: pollOut}
		n = 2
	}
	ts := syscall.NsecToTimespec(left.Nanoseconds())
	// ppoll, not poll: every Linux architecture has it.
	_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(n), uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if errno != 0 && errno != syscall.EINTR {
		return syscallError("poll", errno)
	}
	return nil
}

func (c *stream) close() {
	syscall.Close(c.rfd)
	if c.wfd >= 0 && c.wfd != c.rfd {
		syscall.Close(c.wfd)
	}
}
