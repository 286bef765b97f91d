package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/thick"
	"github.com/seed1280861d/cninet/internal/thickwire"
)

const result040 = "{\n    \"cniVersion\": \"0.4.0\",\n    \"ips\": [\n        {\n            \"version\": \"4\",\n            \"address\": \"198.18.0.5/24\"\n        }\n    ]\n}"

// received is what a fake daemon got: the request as the daemon decodes
// it, and its head.
type received struct {
	req    *thick.Request
	conf   *thick.NetConf
	err    error
	header http.Header
}

// fakeDaemon answers every request on a socket in a temp dir with status
// and body, and records the requests as the daemon decodes them.
func fakeDaemon(t *testing.T, status int, body string) (socket string, got func() []received) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "cninet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reqs []received
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, conf, err := thick.DecodeRequest(r.Body)
		mu.Lock()
		reqs = append(reqs, received{req, conf, err, r.Header})
		mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return socket, func() []received {
		mu.Lock()
		defer mu.Unlock()
		return append([]received(nil), reqs...)
	}
}

func cmdArgs(socket, version string) *cniArgs { return cmdArgsWithin(socket, version, "") }

// cmdArgsWithin is cmdArgs with the shim config's "timeout" ("": none).
func cmdArgsWithin(socket, version, timeout string) *cniArgs {
	conf := fmt.Sprintf(`{"cniVersion":%q,"name":"web","type":"cninet-shim","socket":%q,"timeout":%q,"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}`, version, socket, timeout)
	return &cniArgs{ContainerID: "c1", Netns: "/run/netns/w", IfName: "eth0", Args: "K=V", Path: "/opt/cni/bin", StdinData: []byte(conf)}
}

// testShim is a shim writing to out, owned by "cnitool", whose DEL finds
// cninet in dir.
func testShim(out io.Writer, dir string) *shim {
	s := newShim(out)
	s.version = "v0.0.0-test"
	s.owner = func() string { return "cnitool" }
	s.exeDir = func() (string, error) { return dir, nil }
	return s
}

// The daemon answers an ADD in the config's version (protocol 3): the
// shim prints the answer as it came, and the daemon gets the runtime's
// request, which it decodes as its own.
func TestAddForwardsAndPrintsTheAnswer(t *testing.T) {
	socket, got := fakeDaemon(t, http.StatusOK, result040)
	var out strings.Builder
	if err := testShim(&out, t.TempDir()).add(cmdArgs(socket, "0.4.0")); err != nil {
		t.Fatal(err)
	}
	if out.String() != result040 {
		t.Fatalf("printed %q, want the daemon's answer %q", out.String(), result040)
	}
	r := got()[0]
	if r.err != nil {
		t.Fatalf("the daemon cannot decode the request: %v", r.err)
	}
	req := r.req
	if req.Command != "ADD" || req.ContainerID != "c1" || req.NetNS != "/run/netns/w" || req.IfName != "eth0" || req.Args != "K=V" ||
		req.Path != "/opt/cni/bin" || req.Owner != "cnitool" || r.conf.Name != "web" || !strings.Contains(string(req.Config), `"portMappings"`) {
		t.Fatalf("forwarded %+v, want the runtime's id, netns, ifname, args, path, owner and config", req)
	}
}

// Every request names the shim's protocol and release, and when the
// shim stops waiting for the acknowledgement and for the answer, in its
// head and its body alike.
func TestRequestsCarryTheShimsProtocolAndLimits(t *testing.T) {
	socket, got := fakeDaemon(t, http.StatusOK, "{}")
	before := time.Now()
	if err := testShim(&strings.Builder{}, t.TempDir()).check(cmdArgsWithin(socket, "1.1.0", "45s")); err != nil {
		t.Fatal(err)
	}
	r := got()[0]
	req := r.req
	if r.err != nil || req.Protocol != thickwire.ProtocolFor(thickwire.CmdCheck) || req.ShimVersion != "v0.0.0-test" {
		t.Errorf("protocol %d, shim version %q (%v); want %d, v0.0.0-test", req.Protocol, req.ShimVersion, r.err, thickwire.ProtocolFor(thickwire.CmdCheck))
	}
	if req.AckBy == nil || req.AckBy.Before(before.Add(thickwire.SilenceLimit)) || req.AckBy.After(time.Now().Add(thickwire.SilenceLimit)) {
		t.Errorf("ackBy %v, want %s after the request", req.AckBy, thickwire.SilenceLimit)
	}
	if req.Deadline == nil || req.Deadline.Before(before.Add(45*time.Second)) || req.Deadline.After(time.Now().Add(45*time.Second)) {
		t.Errorf("deadline %v, want the configured 45s after the request", req.Deadline)
	}
	head, ok, err := thick.RequestHead(r.header)
	if !ok || err != nil || head.Protocol != req.Protocol || head.Command != "CHECK" || head.ShimVersion != req.ShimVersion ||
		!head.AckBy.Equal(*req.AckBy) || !head.Deadline.Equal(*req.Deadline) {
		t.Errorf("head %+v (%v, %v), want what the body says: %+v", head, ok, err, req)
	}
}

// A daemon still of protocol 2 (not restarted since cninet was
// upgraded) serves every command but ADD, above all the runtime's DELs:
// each goes in the oldest protocol that has what it needs, in its head
// and its body alike. ADD, which needs 3, gets the daemon's refusal.
func TestADaemonOfProtocol2ServesAllButADD(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		head, _, err := thick.RequestHead(r.Header)
		switch {
		case err != nil:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code":4,"msg":%q}`, err.Error())
			return
		case head.Protocol > 2:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code":104,"msg":"incompatible cninet-shim: protocol %d, this daemon speaks 1 to 2"}`, head.Protocol)
			return
		}
		if req, _, err := thick.DecodeRequest(r.Body); err != nil || req.Protocol != head.Protocol {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code":4,"msg":"body: protocol %d, head: %d (%v)"}`, req.Protocol, head.Protocol, err)
			return
		}
		fmt.Fprint(w, "{}")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	dir := t.TempDir()
	argv, _ := fakeCninet(t, dir, "exit 0")
	s := testShim(&strings.Builder{}, dir)
	for _, command := range []string{thickwire.CmdDel, thickwire.CmdCheck, thickwire.CmdStatus, thickwire.CmdGC} {
		t.Run(command+" is served", func(t *testing.T) {
			if err := s.commandsByName()[command](cmdArgs(socket, "1.1.0")); err != nil {
				t.Fatalf("got %v, want it served", err)
			}
		})
	}
	t.Run("ADD is refused with code 104", func(t *testing.T) {
		var cerr *cniError
		if err := s.add(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != thickwire.CodeIncompatible {
			t.Fatalf("got %v, want the daemon's code 104", err)
		}
	})
	if _, err := os.Stat(argv); err == nil {
		t.Error("a DEL ran in cninet although the daemon answered")
	}
}

// Strings the runtime sends reach the daemon as sent, whatever they hold.
func TestRequestsCarryAnyStringExactly(t *testing.T) {
	socket, got := fakeDaemon(t, http.StatusOK, "{}")
	args := cmdArgs(socket, "1.1.0")
	args.Args = "K=\"v\"\\;X=<&>\u2028\t;Y=é"
	if err := testShim(&strings.Builder{}, t.TempDir()).check(args); err != nil {
		t.Fatal(err)
	}
	if r := got()[0]; r.err != nil || r.req.Args != args.Args {
		t.Fatalf("args %q (%v), want %q", r.req.Args, r.err, args.Args)
	}
}

func TestDaemonErrorsReachTheRuntimeUnchanged(t *testing.T) {
	socket, _ := fakeDaemon(t, http.StatusInternalServerError, `{"code":123,"msg":"bridge says no","details":"cninet: setup failed"}`)
	s := testShim(&strings.Builder{}, t.TempDir())
	for name, command := range s.commandsByName() {
		t.Run(name+" passes the daemon's code and message", func(t *testing.T) {
			var cerr *cniError
			if err := command(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != 123 || cerr.Msg != "bridge says no" || cerr.Details != "cninet: setup failed" {
				t.Fatalf("got %v, want code 123 and the daemon's message and details", err)
			}
		})
	}
	t.Run("an answer that is no CNI error is internal, with the body", func(t *testing.T) {
		socket, _ := fakeDaemon(t, http.StatusBadGateway, "upstream broke")
		var cerr *cniError
		if err := s.check(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != codeInternal || cerr.Details != "upstream broke" {
			t.Fatalf("got %v", err)
		}
	})
}

func (s *shim) commandsByName() map[string]func(*cniArgs) error {
	return map[string]func(*cniArgs) error{"ADD": s.add, "CHECK": s.check, "DEL": s.del, "STATUS": s.status, "GC": s.gc}
}

// answerOnce serves one connection on a socket in a temp dir: it reads
// the request and writes raw, the daemon's answer as bytes.
func answerOnce(t *testing.T, raw string) string {
	return serveOnce(t, func(c net.Conn) {
		buf := make([]byte, 64<<10)
		c.Read(buf)
		c.Write([]byte(raw))
	})
}

// serveOnce listens on a socket in a temp dir and has serve serve the
// first connection, which it then closes.
func serveOnce(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	return socket
}

// The answers HTTP/1.1 allows are read: an acknowledgement first, a
// chunked body, a body until the connection closes.
func TestAnswersAreReadAsHTTPWritesThem(t *testing.T) {
	cases := []struct{ name, raw, want string }{
		{"with a Content-Length after an acknowledgement", "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}", `{"a":1}`},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n{\"a\r\n4\r\n\":1}\r\n0\r\nTrailer: t\r\n\r\n", `{"a":1}`},
		{"until the connection closes", "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"b\":2}", `{"b":2}`},
		{"with LF line ends", "HTTP/1.1 100 Continue\n\nHTTP/1.1 200 OK\ncontent-length: 2\n\n{}", `{}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if err := testShim(&out, t.TempDir()).add(cmdArgs(answerOnce(t, tc.raw), "1.0.0")); err != nil || out.String() != tc.want {
				t.Fatalf("printed %q (%v), want %q", out.String(), err, tc.want)
			}
		})
	}
	bad := []struct{ name, raw string }{
		{"a body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 70\r\n\r\n{}"},
		{"a body longer than the shim reads", fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", maxAnswerBytes+1)},
	}
	for _, tc := range bad {
		t.Run(tc.name+" is an answer cut short (code 11)", func(t *testing.T) {
			var cerr *cniError
			if err := testShim(&strings.Builder{}, t.TempDir()).add(cmdArgs(answerOnce(t, tc.raw), "1.0.0")); !errors.As(err, &cerr) || cerr.Code != codeTryAgainLater || !strings.Contains(cerr.Msg, "cut short") {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// Something answered is the runtime's answer, even when it cannot be
// read: a DEL runs in cninet only when nothing but acknowledgements
// came. What is not HTTP, or not as the daemon writes it, is code 11
// saying so; a final answer cut short is code 11 too.
func TestWhatIsNoAnswerAndWhatIs(t *testing.T) {
	cases := []struct {
		name, raw string
		// says is what the DEL's error says; "": the DEL ran in cninet.
		// why is what its details say was wrong.
		says, why string
	}{
		{"an acknowledgement, then nothing: the DEL runs in cninet", "HTTP/1.1 102 Processing\r\n\r\n", "", ""},
		{"an acknowledgement cut short: the DEL runs in cninet", "HTTP/1.1 102 Proc", "", ""},
		{"nothing at all: the DEL runs in cninet", "", "", ""},
		{"a final answer's head cut short is code 11", "HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nContent-Le", "began an answer, but it was cut short", "unexpected EOF"},
		{"a final answer's status line cut short is code 11", "HTTP/1.1 5", "began an answer, but it was cut short", "unexpected EOF"},
		{"a final answer's body cut short is code 11", "HTTP/1.1 200 OK\r\nContent-Length: 70\r\n\r\n{}", "answered 200 OK, but the answer was cut short", "unexpected EOF"},
		{"what is no HTTP is code 11, not the daemon's protocol", "SSH-2.0-x\r\n\r\n", "not the daemon's protocol", `status line "SSH-2.0-x"`},
		{"the start of what is no HTTP is too", "SSH-2", "not the daemon's protocol", `it begins "SSH-2"`},
		{"a Content-Length that is no length is too", "HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n", "not the daemon's protocol", `a Content-Length that is no length: "Content-Length: -2"`},
		{"a header without a colon is too", "HTTP/1.1 200 OK\r\nbroken\r\n\r\n", "not the daemon's protocol", `a header line without a colon: "broken"`},
		{"a chunk without the CRLF after it is too", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XY0\r\n\r\n", "not the daemon's protocol", `a chunk of 2 bytes not followed by CRLF but by "XY"`},
		{"a chunk size that is no number is too", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", "not the daemon's protocol", `a chunk size that is no hexadecimal number: "zz"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			argv, _ := fakeCninet(t, dir, "exit 0")
			err := testShim(&strings.Builder{}, dir).del(cmdArgs(answerOnce(t, tc.raw), "1.1.0"))
			_, ranErr := os.Stat(argv)
			if tc.says == "" {
				if err != nil || ranErr != nil {
					t.Fatalf("got %v, cninet ran: %v; want the DEL run in cninet", err, ranErr == nil)
				}
				return
			}
			var cerr *cniError
			if !errors.As(err, &cerr) || cerr.Code != codeTryAgainLater || !strings.Contains(cerr.Msg, tc.says) || !strings.Contains(cerr.Details, tc.why) {
				t.Fatalf("got %v, want code 11 saying %q, for %q", err, tc.says, tc.why)
			}
			if ranErr == nil {
				t.Fatal("cninet ran the DEL after the daemon answered")
			}
		})
	}
}

func TestUnreachableDaemon(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nobody.sock")
	s := testShim(&strings.Builder{}, t.TempDir())
	cases := []struct {
		name    string
		command func(*cniArgs) error
		code    uint
	}{
		{"ADD is try again later", s.add, codeTryAgainLater},
		{"CHECK is try again later", s.check, codeTryAgainLater},
		{"GC is try again later", s.gc, codeTryAgainLater},
		{"STATUS is plugin not available", s.status, codePluginNotAvailable},
	}
	for _, tc := range cases {
		t.Run(tc.name+", naming the socket", func(t *testing.T) {
			var cerr *cniError
			if err := tc.command(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != tc.code || !strings.Contains(cerr.Msg, socket) {
				t.Fatalf("got %v, want code %d naming %s", err, tc.code, socket)
			}
		})
	}
	t.Run("a relative socket path is an invalid network config", func(t *testing.T) {
		var cerr *cniError
		if err := s.add(cmdArgs("run/cninet.sock", "1.1.0")); !errors.As(err, &cerr) || cerr.Code != codeInvalidNetworkConfig {
			t.Fatalf("got %v", err)
		}
	})
}

// silentDaemon is a daemon on a socket in a temp dir that never gives a
// final answer until the test ends; released is closed then.
type silentDaemon func(t *testing.T) (socket string, released <-chan struct{})

// The kinds of daemon that never answer.
var silentDaemons = []struct {
	name   string
	daemon silentDaemon
}{
	{"a stopped daemon (the kernel queues the connection, nobody accepts it)", func(t *testing.T) (string, <-chan struct{}) {
		socket := filepath.Join(t.TempDir(), "cninet.sock")
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		t.Cleanup(func() { close(released); l.Close() })
		return socket, released
	}},
	{"a deadlocked daemon (it accepts the connection and never reads)", func(t *testing.T) (string, <-chan struct{}) {
		socket := filepath.Join(t.TempDir(), "cninet.sock")
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { <-released; c.Close() }()
			}
		}()
		t.Cleanup(func() { close(released); l.Close() })
		return socket, released
	}},
	{"a daemon that reads the request and never answers", func(t *testing.T) (string, <-chan struct{}) {
		return hangingDaemon(t, false)
	}},
	{"a daemon that acknowledges the request and never answers", func(t *testing.T) (string, <-chan struct{}) {
		return hangingDaemon(t, true)
	}},
}

// hangingDaemon reads each request, acknowledges it when acknowledge is
// set, and answers only when the test ends.
func hangingDaemon(t *testing.T, acknowledge bool) (string, <-chan struct{}) {
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if acknowledge {
			w.WriteHeader(thickwire.StatusAcknowledged)
		}
		<-released
	})}
	go srv.Serve(l)
	t.Cleanup(func() { close(released); srv.Close() })
	return socket, released
}

// within runs command and fails the test when it is still waiting after
// a minute (the limits under test are a fraction of a second).
func within(t *testing.T, command func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- command() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("still waiting for the daemon after a minute")
	}
	return nil
}

// The other commands give up on a silent daemon with the CNI code of an
// unavailable daemon, naming its socket, and run nothing.
func TestOtherCommandsOnASilentDaemonGiveUp(t *testing.T) {
	s := testShim(&strings.Builder{}, t.TempDir())
	s.answerGrace = 50 * time.Millisecond
	commands := []struct {
		name    string
		command func(*cniArgs) error
		code    uint
	}{
		{"ADD is try again later", s.add, codeTryAgainLater},
		{"CHECK is try again later", s.check, codeTryAgainLater},
		{"GC is try again later", s.gc, codeTryAgainLater},
		{"STATUS is plugin not available", s.status, codePluginNotAvailable},
	}
	for _, daemon := range silentDaemons {
		for _, tc := range commands {
			t.Run(tc.name+" with "+daemon.name, func(t *testing.T) {
				socket, released := daemon.daemon(t)
				var cerr *cniError
				err := within(t, func() error { return tc.command(cmdArgsWithin(socket, "1.1.0", "200ms")) })
				if !errors.As(err, &cerr) || cerr.Code != tc.code || !strings.Contains(cerr.Msg, socket) {
					t.Fatalf("got %v, want code %d naming %s", err, tc.code, socket)
				}
				select {
				case <-released:
					t.Fatal("gave up only once the daemon was released")
				default:
				}
			})
		}
	}
}

// An answer is the runtime's, error or not: the shim never hands a DEL
// to cninet after the daemon answered (it ran the DEL, or decided not to).
func TestDelAnsweredWithAnErrorIsNotRunAgain(t *testing.T) {
	cases := []struct {
		name, answer string
		code         uint
	}{
		{"a request that found no free slot before its deadline", `{"code":11,"msg":"cninet daemon busy: not run: no free slot before the request's deadline"}`, codeTryAgainLater},
		{"a DEL that met a held xtables lock", `{"code":11,"msg":"xtables lock held by another process"}`, codeTryAgainLater},
		{"a daemon draining before it exits", `{"code":11,"msg":"cninet daemon busy: draining before exit"}`, codeTryAgainLater},
		{"a DEL that could not remove everything", `{"code":102,"msg":"cleanup failed"}`, thickwire.CodeCleanupFailed},
		{"a shim the daemon finds incompatible", `{"code":104,"msg":"incompatible cninet-shim"}`, thickwire.CodeIncompatible},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is returned as is", func(t *testing.T) {
			dir := t.TempDir()
			argv, _ := fakeCninet(t, dir, "exit 0")
			socket, _ := fakeDaemon(t, http.StatusInternalServerError, tc.answer)
			var cerr *cniError
			if err := testShim(&strings.Builder{}, dir).del(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != tc.code {
				t.Fatalf("got %v, want the daemon's code %d", err, tc.code)
			}
			if _, err := os.Stat(argv); err == nil {
				t.Fatal("cninet ran the DEL after the daemon answered")
			}
		})
	}
}

// A "timeout" that is no duration is an invalid network config naming
// the key, and nothing is sent.
func TestABadTimeoutIsRefused(t *testing.T) {
	socket, got := fakeDaemon(t, http.StatusOK, "{}")
	s := testShim(&strings.Builder{}, t.TempDir())
	for name, command := range s.commandsByName() {
		t.Run(name, func(t *testing.T) {
			var cerr *cniError
			if err := command(cmdArgsWithin(socket, "1.1.0", "soon")); !errors.As(err, &cerr) || cerr.Code != codeInvalidNetworkConfig ||
				!strings.Contains(cerr.Msg, `"timeout"`) || !strings.Contains(cerr.Msg, "soon") {
				t.Fatalf("got %v, want code 7 naming the key and its value", err)
			}
		})
	}
	if n := len(got()); n != 0 {
		t.Fatalf("sent %d requests with a bad timeout", n)
	}
}

// Errors are printed as skel prints them: indented JSON that libcni reads.
func TestErrorsArePrintedAsSkelPrintsThem(t *testing.T) {
	got := string((&cniError{Code: 11, Msg: "a \"b\"", Details: "c"}).encode())
	want := "{\n    \"code\": 11,\n    \"msg\": \"a \\\"b\\\"\",\n    \"details\": \"c\"\n}"
	if got != want {
		t.Fatalf("printed %q, want %q", got, want)
	}
	if got := string((&cniError{Code: 4, Msg: "m"}).encode()); got != "{\n    \"code\": 4,\n    \"msg\": \"m\"\n}" {
		t.Fatalf("printed %q without details", got)
	}
}

// Once the daemon acknowledged a request, the shim waits for the answer
// past the silence limit, until the deadline (and the grace after it).
func TestAnAcknowledgedRequestWaitsPastTheSilenceLimit(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(thickwire.StatusAcknowledged)
		time.Sleep(500 * time.Millisecond) // five silence limits
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `{"late":true}`)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	s := testShim(&strings.Builder{}, t.TempDir())
	conf := &config{socket: socket, limits: thickwire.Limits{Silence: 100 * time.Millisecond, Timeout: 10 * time.Second}}
	answer, err := s.forward(conf, s.request(thickwire.CmdCheck, cmdArgs(socket, "1.1.0"), conf))
	if err != nil || string(answer) != `{"late":true}` {
		t.Fatalf("got %q, %v; want the answer that came after the acknowledgement", answer, err)
	}
}
