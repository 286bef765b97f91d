package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/thick"
	"github.com/seed1280861d/cninet/internal/thickwire"
)

// An answer in the socket when the shim's time is up is read all the
// same: the time bounds waiting, not reading what has come.
func TestAnAnswerAlreadyThereIsReadPastTheTime(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[1])
	c := &stream{rfd: fds[0], wfd: fds[0], socket: true}
	defer c.close()
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Write(fds[1], []byte("HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")); err != nil {
		t.Fatal(err)
	}
	r := &answerReader{c: c, by: time.Now().Add(-time.Second)}
	var codes []int
	for _, want := range []int{102, 200} {
		h, err := r.head()
		if err != nil || h.code != want {
			t.Fatalf("head %+v, %v after %v; want %d: the answer was there", h, err, codes, want)
		}
		codes = append(codes, h.code)
	}
	if body, err := r.body(answerHead{code: 200, length: 2}); err != nil || string(body) != "{}" {
		t.Fatalf("body %q, %v; want {}", body, err)
	}
	var timeout *timeoutError
	if _, err := c.read(make([]byte, 8), r.by); !errors.As(err, &timeout) {
		t.Fatalf("read of nothing past the time: %v, want a timeout", err)
	}
}

// busyDaemon acknowledges each request once it has its head (as the
// daemon does, before it waits for a slot), reads the body only once the
// shim's silence limit has passed (the slot it waited for), then answers
// 200 "{}". served counts the requests it read whole.
func busyDaemon(t *testing.T) (socket string, served *atomic.Int32) {
	socket = filepath.Join(t.TempDir(), "cninet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	served = &atomic.Int32{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		head, _, err := thick.RequestHead(r.Header)
		if err != nil || head.AckBy == nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code":4,"msg":"head without ackBy: %v"}`, err)
			return
		}
		w.WriteHeader(thickwire.StatusAcknowledged)
		time.Sleep(time.Until(head.AckBy.Add(100 * time.Millisecond)))
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return // the shim hung up
		}
		served.Add(1)
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "{}")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return socket, served
}

// withPad is args with its config padded to more than size bytes (a GC
// with thousands of valid attachments, a big runtimeConfig).
func withPad(args *cniArgs, size int) *cniArgs {
	args.StdinData = []byte(strings.Replace(string(args.StdinData), `"name"`, `"pad":"`+strings.Repeat("x", size)+`","name"`, 1))
	return args
}

// A request bigger than the socket's buffer to a busy daemon (it
// acknowledges the head at once, reads the body only when a slot is
// free, after the silence limit) is served: the shim reads the
// acknowledgement while it still sends, and then waits for the answer
// until its deadline. A DEL is the daemon's, not run in cninet.
func TestABigRequestToABusyDaemonIsServed(t *testing.T) {
	for _, command := range []string{thickwire.CmdAdd, thickwire.CmdCheck, thickwire.CmdStatus, thickwire.CmdGC, thickwire.CmdDel} {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			socket, served := busyDaemon(t)
			dir := t.TempDir()
			argv, _ := fakeCninet(t, dir, "exit 0")
			s := testShim(&strings.Builder{}, dir)
			s.answerGrace = 5 * time.Second
			args := withPad(cmdArgsWithin(socket, "1.1.0", "1s"), 600<<10) // the silence limit is 1s
			if err := within(t, func() error { return s.commandsByName()[command](args) }); err != nil {
				t.Fatalf("%s: %v, want the busy daemon's answer", command, err)
			}
			if n := served.Load(); n != 1 {
				t.Fatalf("the daemon served %d requests, want 1", n)
			}
			if _, err := os.Stat(argv); err == nil {
				t.Fatal("the DEL ran in cninet although the daemon acknowledged and answered it")
			}
		})
	}
}

// A daemon that answers before it has read the whole request (the real
// daemon refusing a body over its 1 MiB, or a raw one answering after
// the head) has its answer reach the runtime, though the rest of the
// request could not be sent: not "no answer", and a DEL is not run in
// cninet.
func TestAnAnswerBeforeTheWholeRequestIsTheRuntimes(t *testing.T) {
	daemons := []struct {
		name   string
		daemon func(t *testing.T) string
		code   uint
		says   string
	}{
		{"the daemon refusing a body over its limit", realDaemon, 4, fmt.Sprintf("body exceeds %d bytes", thickwire.MaxRequestBytes)},
		{"a daemon that answers after the head and hangs up", func(t *testing.T) string {
			return answerAfterHead(t, `{"code":11,"msg":"not now"}`)
		}, 11, "not now"},
	}
	for _, d := range daemons {
		for _, command := range []string{thickwire.CmdAdd, thickwire.CmdDel} {
			t.Run(command+" to "+d.name, func(t *testing.T) {
				socket := d.daemon(t)
				dir := t.TempDir()
				argv, _ := fakeCninet(t, dir, "exit 0")
				args := withPad(cmdArgs(socket, "1.1.0"), 3<<20)
				var cerr *cniError
				err := within(t, func() error { return testShim(&strings.Builder{}, dir).commandsByName()[command](args) })
				if !errors.As(err, &cerr) || cerr.Code != d.code || !strings.Contains(cerr.Msg, d.says) {
					t.Fatalf("got %v, want the daemon's code %d saying %q", err, d.code, d.says)
				}
				if _, err := os.Stat(argv); err == nil {
					t.Fatal("the DEL ran in cninet although the daemon answered")
				}
			})
		}
	}
}

// realDaemon serves thick.Server on a socket in a temp dir; it runs no
// request (none gets that far in the tests that use it).
func realDaemon(t *testing.T) string {
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	l, err := thick.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	s := &thick.Server{AllowPeer: func(uint32) bool { return true }}
	go s.Serve(l)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return socket
}

// answerAfterHead serves one connection: it reads the request's head,
// answers 500 with body, and closes the connection with the body unread.
func answerAfterHead(t *testing.T, body string) string {
	return serveOnce(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			if l, err := r.ReadString('\n'); err != nil || l == "\r\n" {
				break
			}
		}
		fmt.Fprintf(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
}
