package thick

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

func TestListen(t *testing.T) {
	t.Run("makes the directory 0700 and the socket 0600", func(t *testing.T) {
		socket := filepath.Join(t.TempDir(), "run", "cninet.sock")
		l := listen(t, socket)
		defer l.Close()
		assertMode(t, filepath.Dir(socket), 0o700)
		assertMode(t, socket, 0o600)
	})
	t.Run("tightens an existing directory to 0700", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		l := listen(t, filepath.Join(dir, "s.sock"))
		defer l.Close()
		assertMode(t, dir, 0o700)
	})
	t.Run("replaces a stale socket nobody answers on", func(t *testing.T) {
		socket := filepath.Join(t.TempDir(), "s.sock")
		stale := listen(t, socket)
		stale.(*net.UnixListener).SetUnlinkOnClose(false)
		stale.Close()
		if _, err := os.Lstat(socket); err != nil {
			t.Fatalf("the stale socket file is gone before the test: %v", err)
		}
		l := listen(t, socket)
		defer l.Close()
		if conn, err := net.Dial("unix", socket); err != nil {
			t.Fatalf("the new socket does not answer: %v", err)
		} else {
			conn.Close()
		}
	})
	t.Run("refuses a socket a live daemon serves", func(t *testing.T) {
		socket := filepath.Join(t.TempDir(), "s.sock")
		live := listen(t, socket)
		defer live.Close()
		if l, err := Listen(socket); err == nil || !strings.Contains(err.Error(), "another daemon") {
			if l != nil {
				l.Close()
			}
			t.Fatalf("got %v, want an error saying another daemon serves it", err)
		}
	})
	t.Run("refuses to replace a file that is not a socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s.sock")
		if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
		if l, err := Listen(path); err == nil {
			l.Close()
			t.Fatal("listened over a regular file")
		}
		if b, _ := os.ReadFile(path); string(b) != "keep me" {
			t.Fatal("the regular file was changed")
		}
	})
}

func listen(t *testing.T, socket string) net.Listener {
	t.Helper()
	l, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s has mode %o, want %o", path, got, want)
	}
}

// startServer serves s on a socket in a temp dir and returns a client.
func startServer(t *testing.T, s *Server) *http.Client {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "s.sock")
	l := listen(t, socket)
	go s.Serve(l)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return net.Dial("unix", socket) },
	}}
}

func post(t *testing.T, c *http.Client, body string) (int, types.Error) {
	t.Helper()
	code, cerr, err := tryPost(c, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, cerr
}

// tryPost posts body; a failure answer must be a CNI error.
func tryPost(c *http.Client, body string) (int, types.Error, error) {
	var cerr types.Error
	resp, err := c.Post("http://cninet"+RequestPath, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, cerr, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(b, &cerr); err != nil {
			return resp.StatusCode, cerr, fmt.Errorf("HTTP %d without a CNI error: %s", resp.StatusCode, b)
		}
	}
	return resp.StatusCode, cerr, nil
}

func TestServerPeerCheck(t *testing.T) {
	var ran atomic.Int32
	run := func(context.Context, *Request, *NetConf) ([]byte, error) { ran.Add(1); return nil, nil }
	status := reqBody("DEL", "c1", "", "eth0", shimConf)
	t.Run("a peer whose uid is not allowed is refused before anything runs", func(t *testing.T) {
		c := startServer(t, &Server{run: run, AllowPeer: func(uid uint32) bool { return uid == uint32(os.Getuid())+1 }})
		code, cerr := post(t, c, status)
		if code == http.StatusOK || cerr.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(cerr.Msg, "only root") || ran.Load() != 0 {
			t.Fatalf("HTTP %d %+v, ran %d: want a refusal naming the rule, nothing run", code, cerr, ran.Load())
		}
	})
	t.Run("an allowed peer is served", func(t *testing.T) {
		c := startServer(t, &Server{run: run, AllowPeer: func(uid uint32) bool { return uid == uint32(os.Getuid()) }})
		if code, cerr := post(t, c, status); code != http.StatusOK || ran.Load() != 1 {
			t.Fatalf("HTTP %d %+v, ran %d: want it served", code, cerr, ran.Load())
		}
	})
}

func TestServerQueuesBeyondItsConcurrency(t *testing.T) {
	var inFlight, most atomic.Int32
	run := func(context.Context, *Request, *NetConf) ([]byte, error) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		inFlight.Add(-1)
		return nil, nil
	}
	c := startServer(t, &Server{run: run, MaxConcurrent: 3, AllowPeer: func(uint32) bool { return true }})
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, err := tryPost(c, reqBody("DEL", "c1", "", "eth0", shimConf)); err != nil || code != http.StatusOK {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 || most.Load() != 3 {
		t.Fatalf("%d of 30 failed, at most %d ran at once: want all served, 3 at a time", failed.Load(), most.Load())
	}
}

func TestServerDeadlineWhileQueued(t *testing.T) {
	release := make(chan struct{})
	run := func(context.Context, *Request, *NetConf) ([]byte, error) { <-release; return nil, nil }
	c := startServer(t, &Server{run: run, MaxConcurrent: 1, Timeout: 100 * time.Millisecond, AllowPeer: func(uint32) bool { return true }})
	defer close(release)
	go tryPost(c, reqBody("DEL", "c1", "", "eth0", shimConf))
	time.Sleep(30 * time.Millisecond)
	code, cerr := post(t, c, reqBody("DEL", "c2", "", "eth0", shimConf))
	if code == http.StatusOK || cerr.Code != types.ErrTryAgainLater {
		t.Fatalf("HTTP %d %+v: want try again later once the deadline passed in the queue", code, cerr)
	}
}

func TestServerDrains(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	run := func(context.Context, *Request, *NetConf) ([]byte, error) {
		close(started)
		<-release
		return []byte(`{"ok":1}`), nil
	}
	s := &Server{run: run, AllowPeer: func(uint32) bool { return true }}
	c := startServer(t, s)
	for deadline := time.Now().Add(time.Second); !s.Ready() && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if !s.Ready() {
		t.Fatal("not ready while serving")
	}
	answered := make(chan int, 1)
	go func() { code, _, _ := tryPost(c, reqBody("DEL", "c1", "", "eth0", shimConf)); answered <- code }()
	<-started
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	time.Sleep(30 * time.Millisecond)
	if s.Ready() {
		t.Fatal("ready while draining")
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("the request in flight got HTTP %d, want it finished", code)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}
