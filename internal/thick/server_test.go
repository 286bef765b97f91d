package thick

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
)

func TestListen(t *testing.T) {
	t.Run("makes the directory 0700 and the socket 0600", func(t *testing.T) {
		socket := filepath.Join(t.TempDir(), "run", "cninet.sock")
		l := listen(t, socket)
		defer l.Close()
		assertMode(t, filepath.Dir(socket), 0o700)
		assertMode(t, socket, 0o600)
	})
	t.Run("listens in an existing private directory and leaves its mode", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		l := listen(t, filepath.Join(dir, "s.sock"))
		defer l.Close()
		assertMode(t, dir, 0o750)
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

// shimBody is a DEL of the current protocol with the shim's limits.
func shimBody(t *testing.T, id string, ackBy, deadline time.Time) string {
	t.Helper()
	b, err := json.Marshal(Request{Protocol: ProtocolVersion, Command: CmdDel, ContainerID: id, IfName: "eth0",
		Config: json.RawMessage(shimConf), AckBy: &ackBy, Deadline: &deadline})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The daemon acknowledges a request as soon as it has accepted it, while
// the request still waits for a slot: a busy daemon is never silent.
func TestServerAcknowledgesBeforeItQueues(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // before the server's cleanup waits for its requests
	run := func(context.Context, *Request, *NetConf) ([]byte, error) { <-release; return nil, nil }
	c := startServer(t, &Server{run: run, MaxConcurrent: 1, AllowPeer: func(uint32) bool { return true }})
	go tryPost(c, reqBody("DEL", "c1", "", "eth0", shimConf)) // holds the only slot
	acknowledged := make(chan int, 1)
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { acknowledged <- code; return nil }}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost,
		"http://cninet"+RequestPath, strings.NewReader(reqBody("DEL", "c2", "", "eth0", shimConf)))
	answered := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	select {
	case code := <-acknowledged:
		if code != StatusAcknowledged {
			t.Fatalf("informational status %d, want %d", code, StatusAcknowledged)
		}
	case err := <-answered:
		t.Fatalf("answered (%v) before any acknowledgement", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no acknowledgement within 10s while queued")
	}
	once.Do(func() { close(release) })
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
}

// A request the shim stopped waiting for is refused (code 11) and never
// run: the shim has answered the runtime, and for a DEL run it itself.
func TestServerRefusesWhatTheShimGaveUpOn(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name string
		// busy: another request holds the only slot meanwhile.
		busy bool
		body func(t *testing.T) string
	}{
		{"a request read after its acknowledgement limit (the daemon was stopped)", false,
			func(t *testing.T) string { return shimBody(t, "c2", now.Add(-time.Second), now.Add(time.Hour)) }},
		{"a request whose shim deadline passes while it waits for a slot", true,
			func(t *testing.T) string {
				return shimBody(t, "c2", now.Add(time.Hour), time.Now().Add(100*time.Millisecond))
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newSlotHolder()
			c := startServer(t, &Server{run: h.run, MaxConcurrent: 1, AllowPeer: func(uint32) bool { return true }})
			defer h.free()
			if tc.busy {
				go tryPost(c, reqBody("DEL", "c1", "", "eth0", shimConf))
				waitFor(t, "c1 to run", func() bool { return slices.Contains(h.ranNow(), "c1") })
			}
			code, cerr := post(t, c, tc.body(t))
			if got := h.ranNow(); code == http.StatusOK || cerr.Code != types.ErrTryAgainLater || slices.Contains(got, "c2") {
				t.Fatalf("HTTP %d %+v, ran %v: want code 11 and c2 never run", code, cerr, got)
			}
		})
	}
}

// slotHolder is a Server's run that records each request's container id
// and holds the slot of container c1 until freed. Free it with defer:
// the server's cleanup waits for the requests it runs.
type slotHolder struct {
	mu      sync.Mutex
	ran     []string
	release chan struct{}
	once    sync.Once
}

func newSlotHolder() *slotHolder { return &slotHolder{release: make(chan struct{})} }

func (h *slotHolder) run(_ context.Context, req *Request, _ *NetConf) ([]byte, error) {
	h.mu.Lock()
	h.ran = append(h.ran, req.ContainerID)
	h.mu.Unlock()
	if req.ContainerID == "c1" {
		<-h.release
	}
	return nil, nil
}

// free lets c1 finish; it may be called again.
func (h *slotHolder) free() { h.once.Do(func() { close(h.release) }) }

func (h *slotHolder) ranNow() []string { return ranNow(&h.mu, &h.ran) }

func ranNow(mu *sync.Mutex, ran *[]string) []string {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(*ran)
}

// A shim of another protocol is refused with code 104 naming both
// protocols and which side is older, with what to do, before anything
// runs.
func TestServerRefusesAnIncompatibleShim(t *testing.T) {
	var ran atomic.Int32
	run := func(context.Context, *Request, *NetConf) ([]byte, error) { ran.Add(1); return nil, nil }
	c := startServer(t, &Server{run: run, AllowPeer: func(uint32) bool { return true }})
	cases := []struct {
		name, body string
		want       []string
	}{
		{"a shim older than protocol numbers", strings.Replace(reqBody("DEL", "c1", "", "eth0", shimConf), `"protocol":1,`, "", 1),
			[]string{"older than protocol numbers", "the shim is older than the daemon", "install the cninet-shim of the daemon's release"}},
		{"a shim of a newer protocol (a daemon not restarted since an upgrade)", strings.Replace(reqBody("DEL", "c1", "", "eth0", shimConf), `"protocol":1,`, `"protocol":99,"shimVersion":"v9.0.0",`, 1),
			[]string{"cninet-shim v9.0.0 speaks thick-mode protocol 99", "the daemon is older than the shim", "restart cninet daemon"}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			code, cerr := post(t, c, tc.body)
			if code != http.StatusBadRequest || cerr.Code != CodeIncompatible || ran.Load() != 0 {
				t.Fatalf("HTTP %d %+v, ran %d: want code %d", code, cerr, ran.Load(), CodeIncompatible)
			}
			for _, want := range append(tc.want, fmt.Sprintf("speaks %d to %d", OldestProtocol, ProtocolVersion)) {
				if !strings.Contains(cerr.Msg, want) {
					t.Errorf("%q does not say %q", cerr.Msg, want)
				}
			}
		})
	}
}

// At the drain timeout, an ADD still running is cancelled and rolled
// back: its attachment removed by a DEL of the same id and interface,
// the runtime told it failed (code 11). A DEL in flight is not cut
// short, and an ADD that found its attachment there already is not the
// rollback's to remove.
func TestServerRollsBackUnfinishedAddsAtTheDrainTimeout(t *testing.T) {
	cases := []struct {
		name         string
		addErr       error // what the ADD returns once cancelled
		wantRollback bool
	}{
		{"an ADD cut short is rolled back", context.Canceled, true},
		{"an ADD that finished as the timeout passed is rolled back", nil, true},
		{"an ADD that found the attachment there already is not", fmt.Errorf("%w: c1", cninet.ErrAlreadyAttached), false},
		{"an ADD still waiting for another command of its container is not", fmt.Errorf("%w: %w: c1", ErrBusy, errNotStarted), false},
		{"an ADD whose id is another container's is not", fmt.Errorf("%w: c1", ErrDelegateIDTaken), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var ran []string
			addStarted := make(chan struct{})
			run := func(ctx context.Context, req *Request, _ *NetConf) ([]byte, error) {
				mu.Lock()
				ran = append(ran, req.Command+" "+req.ContainerID+" "+req.IfName)
				mu.Unlock()
				if req.Command == CmdAdd {
					close(addStarted)
					<-ctx.Done()
					return []byte(`{}`), tc.addErr
				}
				return nil, ctx.Err()
			}
			s := &Server{run: run, AllowPeer: func(uint32) bool { return true }, RollbackTimeout: 5 * time.Second}
			c := startServer(t, s)
			type answer struct {
				code int
				cerr types.Error
			}
			answered := make(chan answer, 1)
			go func() {
				code, cerr, _ := tryPost(c, reqBody("ADD", "c1", "/proc/self/ns/net", "eth0", shimConf))
				answered <- answer{code, cerr}
			}()
			<-addStarted
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown: %v, want the drain timeout's error", err)
			}
			s.http.Close() // the daemon exits as Shutdown returns: its answers must be out by then
			a := <-answered
			rolledBack := slices.Contains(ranNow(&mu, &ran), "DEL c1 eth0")
			if rolledBack != tc.wantRollback {
				t.Fatalf("ran %v: rolled back %v, want %v", ranNow(&mu, &ran), rolledBack, tc.wantRollback)
			}
			if a.code == http.StatusOK {
				t.Fatalf("the ADD was answered success though the daemon gave up on it")
			}
			if tc.wantRollback && (a.cerr.Code != types.ErrTryAgainLater || !strings.Contains(a.cerr.Msg, "rolled back")) {
				t.Fatalf("the ADD was answered %+v, want code 11 saying it was rolled back", a.cerr)
			}
		})
	}
}

func TestServerDrainLetsADelInFlightFinish(t *testing.T) {
	delStarted, release := make(chan struct{}), make(chan struct{})
	run := func(ctx context.Context, req *Request, _ *NetConf) ([]byte, error) {
		close(delStarted)
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s := &Server{run: run, AllowPeer: func(uint32) bool { return true }, RollbackTimeout: 5 * time.Second}
	c := startServer(t, s)
	answered := make(chan int, 1)
	go func() { code, _, _ := tryPost(c, reqBody("DEL", "c1", "", "eth0", shimConf)); answered <- code }()
	<-delStarted
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	time.Sleep(100 * time.Millisecond) // past the drain timeout
	close(release)
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("the DEL in flight got HTTP %d, want it run to its end", code)
	}
	if err := <-shut; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the drain timeout's error", err)
	}
}

// STATUS and CHECK have slots of their own: a runtime's probes are
// answered while every ADD slot is taken.
func TestServerProbesAreNotQueuedBehindAdds(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	addRunning := make(chan struct{}, 1)
	run := func(ctx context.Context, req *Request, _ *NetConf) ([]byte, error) {
		if req.Command == CmdAdd {
			addRunning <- struct{}{}
			<-release
		}
		return nil, nil
	}
	g := &recordingGauges{}
	c := startServer(t, &Server{run: run, MaxConcurrent: 1, Timeout: 2 * time.Second, Gauges: g, AllowPeer: func(uint32) bool { return true }})
	go tryPost(c, reqBody("ADD", "c1", "/proc/self/ns/net", "eth0", shimConf))
	<-addRunning
	go tryPost(c, reqBody("ADD", "c2", "/proc/self/ns/net", "eth0", shimConf)) // queued behind c1
	for _, command := range []string{"STATUS", "CHECK"} {
		body := reqBody(command, "", "", "", shimConf)
		if command == "CHECK" {
			body = reqBody(command, "c3", "/proc/self/ns/net", "eth0", shimConf)
		}
		if code, cerr := post(t, c, body); code != http.StatusOK {
			t.Fatalf("%s with every ADD slot taken: HTTP %d %+v, want it served in a slot of its own", command, code, cerr)
		}
	}
	waitForGauge(t, func() bool { return g.get("queued requests") == 1 && g.get("in flight ADD") == 1 })
	once.Do(func() { close(release) })
	waitForGauge(t, func() bool {
		return g.get("queued requests") == 0 && g.get("in flight ADD") == 0 && g.get("waited requests") == 2
	})
	if g.get("waited probes") != 2 {
		t.Fatalf("gauges %v: want the probes' two waits counted in their own pool", g.snapshot())
	}
}

// recordingGauges sums what a Server tells its Gauges.
type recordingGauges struct {
	mu   sync.Mutex
	sums map[string]int64
}

func (g *recordingGauges) add(key string, delta int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sums == nil {
		g.sums = map[string]int64{}
	}
	g.sums[key] += delta
}

func (g *recordingGauges) InFlight(command string, delta int64) { g.add("in flight "+command, delta) }
func (g *recordingGauges) Queued(pool string, delta int64)      { g.add("queued "+pool, delta) }
func (g *recordingGauges) Waited(pool string, _ time.Duration)  { g.add("waited "+pool, 1) }

func (g *recordingGauges) get(key string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sums[key]
}

func (g *recordingGauges) snapshot() map[string]int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.sums)
}

func waitForGauge(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("the gauges never showed what was expected")
}

// Each request gets one log line naming what it was and how it ended.
func TestServerLogsOneLinePerRequest(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Output: &lockedBuilder{mu: &mu, b: &buf}, JSONFormat: true, Level: hclog.Info})
	run := func(_ context.Context, req *Request, _ *NetConf) ([]byte, error) {
		if req.ContainerID == "bad" {
			return nil, fmt.Errorf("%w: no", cninet.ErrCheckFailed)
		}
		return nil, nil
	}
	c := startServer(t, &Server{run: run, Logger: logger, AllowPeer: func(uint32) bool { return true }})
	post(t, c, reqBody("DEL", "good", "/run/netns/w", "eth0", shimConf))
	post(t, c, reqBody("CHECK", "bad", "/run/netns/w", "eth1", shimConf))
	mu.Lock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	mu.Unlock()
	if len(lines) != 2 {
		t.Fatalf("%d log lines for 2 requests, want 2:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	want := []map[string]any{
		{"command": "DEL", "container_id": "good", "netns": "/run/netns/w", "ifname": "eth0", "network": "web", "code": float64(0)},
		{"command": "CHECK", "container_id": "bad", "netns": "/run/netns/w", "ifname": "eth1", "network": "web", "code": float64(CodeCheckFailed)},
	}
	for i, line := range lines {
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatal(err)
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%s)", i, k, got[k], v, line)
			}
		}
		for _, k := range []string{"owner", "duration"} {
			if _, ok := got[k]; !ok {
				t.Errorf("line %d has no %s: %s", i, k, line)
			}
		}
	}
}

// A request that waited for a slot says how long in its log line
// (queued), apart from its duration: a slow request is told from a busy
// daemon. One that found a slot free logs (almost) no wait.
func TestServerLogsTheWaitForASlot(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Output: &lockedBuilder{mu: &mu, b: &buf}, JSONFormat: true, Level: hclog.Info})
	started, release := make(chan struct{}), make(chan struct{})
	run := func(_ context.Context, req *Request, _ *NetConf) ([]byte, error) {
		if req.ContainerID == "first" {
			close(started)
			<-release
		}
		return nil, nil
	}
	c := startServer(t, &Server{run: run, Logger: logger, MaxConcurrent: 1, AllowPeer: func(uint32) bool { return true }})
	done := make(chan struct{})
	go func() { defer close(done); post(t, c, reqBody("DEL", "first", "/run/netns/w", "eth0", shimConf)) }()
	<-started
	const held = 200 * time.Millisecond
	time.AfterFunc(held, func() { close(release) })
	post(t, c, reqBody("DEL", "second", "/run/netns/w", "eth0", shimConf))
	<-done
	mu.Lock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	mu.Unlock()
	queued := map[string]time.Duration{}
	for _, line := range lines {
		var got struct {
			ID       string  `json:"container_id"`
			Queued   float64 `json:"queued"`
			Duration float64 `json:"duration"`
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(line, `"queued"`) {
			t.Fatalf("no queued in %s", line)
		}
		if got.Queued > got.Duration {
			t.Errorf("%s: queued %v longer than the whole request, %v", got.ID, time.Duration(got.Queued), time.Duration(got.Duration))
		}
		queued[got.ID] = time.Duration(got.Queued)
	}
	if len(queued) != 2 {
		t.Fatalf("log lines %q, want one per request", lines)
	}
	if queued["second"] < held/2 {
		t.Errorf("the request behind a held slot logged queued=%v, want about %v", queued["second"], held)
	}
	if queued["first"] >= held/2 {
		t.Errorf("the request that found a slot free logged queued=%v, want about 0", queued["first"])
	}
}

type lockedBuilder struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// A request still waiting for a slot when the drain timeout passes is
// refused unrun (code 11), not left to wait out its deadline.
func TestServerRefusesWhatIsStillQueuedAtTheDrainTimeout(t *testing.T) {
	started := make(chan struct{})
	var ran atomic.Int32
	run := func(ctx context.Context, req *Request, _ *NetConf) ([]byte, error) {
		ran.Add(1)
		if req.ContainerID == "c1" {
			close(started)
			<-ctx.Done()
		}
		return nil, ctx.Err()
	}
	s := &Server{run: run, MaxConcurrent: 1, AllowPeer: func(uint32) bool { return true }, RollbackTimeout: 5 * time.Second}
	c := startServer(t, s)
	go tryPost(c, reqBody("GC", "c1", "", "", shimConf))
	<-started
	queued := make(chan types.Error, 1)
	go func() { _, cerr, _ := tryPost(c, reqBody("DEL", "c2", "", "eth0", shimConf)); queued <- cerr }()
	time.Sleep(50 * time.Millisecond) // c2 waits for c1's slot
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); errors.Is(err, ErrUnfinished) {
		t.Fatalf("Shutdown: %v: a queued request outlived the rollback timeout", err)
	}
	if cerr := <-queued; cerr.Code != types.ErrTryAgainLater || !strings.Contains(cerr.Msg, "drain timeout") || ran.Load() != 1 {
		t.Fatalf("the queued DEL was answered %+v (ran %d requests), want code 11 unrun, naming the drain timeout", cerr, ran.Load())
	}
}

// At debug level each request gets a second line after its answer: when
// it reached each step, in Unix nanoseconds, in the order it took them
// (the benchmarks take the hand-off apart with it).
func TestServerLogsTheStepsOfARequestAtDebugLevel(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Output: &lockedBuilder{mu: &mu, b: &buf}, JSONFormat: true, Level: hclog.Debug})
	c := startServer(t, &Server{run: func(context.Context, *Request, *NetConf) ([]byte, error) { return nil, nil }, Logger: logger, AllowPeer: func(uint32) bool { return true }})
	before := time.Now().UnixNano()
	post(t, c, reqBody("DEL", "c1", "/run/netns/w", "eth0", shimConf))
	var steps map[string]any
	for deadline := time.Now().Add(10 * time.Second); steps == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var got map[string]any
			if json.Unmarshal([]byte(line), &got) == nil && got["@message"] == "request steps" {
				steps = got
			}
		}
		mu.Unlock()
	}
	if steps == nil || steps["command"] != "DEL" || steps["container_id"] != "c1" {
		t.Fatalf("steps line %v, want one of the DEL of c1", steps)
	}
	last := float64(before)
	for _, step := range []string{"accepted", "head", "acknowledged", "slot", "body", "ran", "answered"} {
		at, ok := steps[step].(float64)
		if !ok || at < last || at > float64(time.Now().UnixNano()) {
			t.Fatalf("step %s at %v, want a time after the one before (%v): %v", step, steps[step], last, steps)
		}
		last = at
	}
}
