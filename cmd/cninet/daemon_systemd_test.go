package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSdNotify(t *testing.T) {
	cases := []struct {
		name string
		addr func(t *testing.T) string // "" unsets NOTIFY_SOCKET
	}{
		{"a path", func(t *testing.T) string { return filepath.Join(t.TempDir(), "notify") }},
		{"an abstract address (@…)", func(t *testing.T) string { return "@cninet-test-notify-" + strconv.Itoa(os.Getpid()) }},
	}
	for _, tc := range cases {
		t.Run("sends the state to "+tc.name, func(t *testing.T) {
			addr := tc.addr(t)
			name := addr
			if addr[0] == '@' {
				name = "\x00" + addr[1:]
			}
			conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			t.Setenv("NOTIFY_SOCKET", addr)
			if err := sdNotify("READY=1"); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 64)
			n, err := conn.Read(buf)
			if err != nil || string(buf[:n]) != "READY=1" {
				t.Fatalf("received %q, %v; want READY=1", buf[:n], err)
			}
		})
	}
	t.Run("does nothing without NOTIFY_SOCKET", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "")
		if err := sdNotify("READY=1"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("refuses an address that is neither a path nor abstract", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "relative/notify")
		if err := sdNotify("READY=1"); err == nil || !strings.Contains(err.Error(), `"relative/notify"`) {
			t.Fatalf("got %v, want an error naming the address", err)
		}
	})
}

// A socket passed for another process (LISTEN_PID not ours) is not
// taken, and the variables are cleared either way, so that no plugin
// the daemon runs inherits them.
func TestActivatedListenerIgnoresAnotherProcesssSockets(t *testing.T) {
	t.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()+1))
	t.Setenv("LISTEN_FDS", "1")
	l, err := activatedListener()
	if l != nil || err != nil {
		t.Fatalf("got %v, %v; want no listener and no error", l, err)
	}
	if os.Getenv("LISTEN_PID") != "" || os.Getenv("LISTEN_FDS") != "" {
		t.Fatal("LISTEN_PID and LISTEN_FDS still set")
	}
}

func TestActivatedListenerRefusesABadCount(t *testing.T) {
	t.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	t.Setenv("LISTEN_FDS", "zero")
	if l, err := activatedListener(); l != nil || err == nil || !strings.Contains(err.Error(), `LISTEN_FDS="zero"`) {
		t.Fatalf("got %v, %v; want an error naming LISTEN_FDS", l, err)
	}
}

func TestReadyz(t *testing.T) {
	cases := []struct {
		name      string
		serving   bool
		delegates error
		code      int
		body      string
	}{
		{"serving with every delegate ready is ready", true, nil, http.StatusOK, "ready"},
		{"not serving (starting or draining) is not ready", false, nil, http.StatusServiceUnavailable, "not serving"},
		{"a delegate whose STATUS fails makes it not ready, saying why", true, errors.New(`network "web": CNI STATUS: bridge down`), http.StatusServiceUnavailable, "bridge down"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := readyz(func() bool { return tc.serving }, func(context.Context) error { return tc.delegates })
			w := httptest.NewRecorder()
			h(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
				t.Fatalf("%d %q, want %d with %q", w.Code, w.Body.String(), tc.code, tc.body)
			}
		})
	}
}
