package thick

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/buildinfo"
	"github.com/seed1280861d/cninet/internal/thickwire"
	"golang.org/x/sys/unix"
)

// Server serves shim requests on a unix socket. It keeps nothing that
// matters in memory: libcni's cache (in the Configurator's CacheDir) and
// the host are the state, so a restarted Server serves attachments made
// before.
type Server struct {
	// C runs the requests, when Delegates is nil.
	C Configurator
	// Delegates, when set, runs the requests instead of C: the conf dir's
	// networks once it holds a conflist. Until then STATUS answers not
	// ready (code 50), ADD, CHECK and GC an unknown network (code 7), and
	// a DEL runs with the conflist the host registry recorded at the ADD
	// (ConfiguratorForDel).
	Delegates *Delegates
	// Info is the daemon's conf dir, plugins, cache and registry, for a
	// DEL while Delegates has no conflist.
	Info Info
	// Logger gets one line per request: its command, container id, netns,
	// interface, network, owner, duration, the part of it spent waiting
	// for a slot (queued) and code (0: success); Info level on success,
	// Warn on failure. nil: a null logger.
	Logger hclog.Logger
	// MaxConcurrent requests run at once; more wait for a slot until
	// their deadline. 0: DefaultMaxConcurrent. STATUS and CHECK do not
	// take these slots but MaxConcurrentProbes of their own, so that a
	// runtime's periodic probes are not queued behind a burst of ADDs.
	MaxConcurrent int
	// MaxConcurrentProbes STATUS and CHECK requests run at once.
	// 0: DefaultMaxConcurrentProbes.
	MaxConcurrentProbes int
	// RollbackTimeout bounds, once Shutdown's drain timeout has passed,
	// the rollback of the ADDs still running (their attachments removed,
	// their answer an error). 0: DefaultRollbackTimeout.
	RollbackTimeout time.Duration
	// Gauges, when set, is told of the requests in flight and queued.
	Gauges Gauges
	// Timeout is each request's deadline, its wait for a slot included.
	// 0: DefaultTimeout.
	Timeout time.Duration
	// Observe, when set, is told each request's command, result ("ok" or
	// the CNI error code) and duration.
	Observe func(command, result string, d time.Duration)
	// AllowPeer says whether a peer with this uid may send requests. nil:
	// root only.
	AllowPeer func(uid uint32) bool

	// run serves a decoded request; nil: dispatch (Serve with Delegates'
	// Configurator, or C). Tests replace it.
	run func(ctx context.Context, req *Request, conf *NetConf) ([]byte, error)

	once        sync.Once
	slots       chan struct{} // ADD, DEL, GC
	probeSlots  chan struct{} // STATUS, CHECK
	started     atomic.Bool
	draining    atomic.Bool
	http        *http.Server
	abort       context.Context // done when the drain timeout has passed
	abortNow    context.CancelFunc
	inFlight    atomic.Int64 // handlers running, for Shutdown to wait on after the drain timeout
	handlerDone chan struct{}
}

// ErrUnfinished: Shutdown returned with requests still running, past the
// drain timeout and the rollback timeout after it.
var ErrUnfinished = errors.New("requests unfinished at exit")

// Gauges is told what the daemon's queue looks like (daemon metrics).
// pool is "requests" (ADD, DEL, GC) or "probes" (STATUS, CHECK).
type Gauges interface {
	// InFlight: delta requests started (1) or finished (-1) running.
	InFlight(command string, delta int64)
	// Queued: delta requests started (1) or stopped (-1) waiting for a
	// slot of pool.
	Queued(pool string, delta int64)
	// Waited: a request waited d for a slot of pool (whether it got one).
	Waited(pool string, d time.Duration)
}

// Defaults of Server's limits: a burst of pod starts queues behind a few
// plugin chains at a time instead of forking hundreds of plugins (and
// their iptables) at once.
const (
	DefaultMaxConcurrent = 16
	DefaultTimeout       = thickwire.DefaultTimeout
	// DefaultMaxConcurrentProbes: STATUS and CHECK fork few plugins (or
	// none), so a small pool of their own keeps them answering promptly.
	DefaultMaxConcurrentProbes = 4
	// DefaultRollbackTimeout bounds the rollback of unfinished ADDs at
	// the end of a drain.
	DefaultRollbackTimeout = 30 * time.Second
)

type (
	peerKey     struct{} // the peer's uid, or -1
	connKey     struct{} // the request's net.Conn
	acceptedKey struct{} // when the connection was accepted
)

// Listen prepares socket's directory (PrepareSocketDir: made root's and
// 0700 when missing, refused when another user could change it, never
// chmodded), replaces a stale socket file (one nobody answers on; a live
// daemon's is an error), and listens there with mode 0600.
func Listen(socket string) (net.Listener, error) {
	if err := PrepareSocketDir(filepath.Dir(socket)); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(socket); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; remove it or choose another --socket", socket)
		}
		if conn, err := net.DialTimeout("unix", socket, time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("another daemon serves %s", socket)
		}
		if err := os.Remove(socket); err != nil {
			return nil, fmt.Errorf("removing the stale socket: %w", err)
		}
	}
	old := unix.Umask(0o177) // the socket is born 0600: no window in which others may connect
	l, err := net.Listen("unix", socket)
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve serves l until Shutdown; it returns http.ErrServerClosed then.
func (s *Server) Serve(l net.Listener) error {
	s.init()
	s.started.Store(true)
	return s.http.Serve(l)
}

// init prepares what Serve and Shutdown share, once.
func (s *Server) init() {
	s.once.Do(func() {
		if s.Logger == nil {
			s.Logger = hclog.NewNullLogger()
		}
		n := s.MaxConcurrent
		if n <= 0 {
			n = DefaultMaxConcurrent
		}
		s.slots = make(chan struct{}, n)
		p := s.MaxConcurrentProbes
		if p <= 0 {
			p = DefaultMaxConcurrentProbes
		}
		s.probeSlots = make(chan struct{}, p)
		s.abort, s.abortNow = context.WithCancel(context.Background())
		s.handlerDone = make(chan struct{}, 1)
		mux := http.NewServeMux()
		mux.HandleFunc(RequestPath, s.handle)
		s.http = &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				ctx = context.WithValue(ctx, acceptedKey{}, time.Now())
				return context.WithValue(context.WithValue(ctx, peerKey{}, peerUID(c)), connKey{}, c)
			},
		}
	})
}

// Ready reports whether the server takes requests: serving, and not
// draining. Whether its delegates can attach is Delegates.Ready's.
func (s *Server) Ready() bool { return s.started.Load() && !s.draining.Load() }

// Shutdown stops accepting requests and waits, until ctx is done, for
// the requests in flight to finish. When ctx is done first, the ADDs
// still running are cancelled and rolled back (their attachment removed,
// their answer a code-11 error saying so), the requests still waiting
// for a slot are refused unrun (code 11), and Shutdown waits for that,
// up to RollbackTimeout, then returns ctx's error, also wrapping
// ErrUnfinished when requests were still running then; a DEL still
// running is not cut short within that time (a DEL again finishes what
// it leaves). Nothing of the conf dir is touched.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.draining.Store(true)
	err := s.http.Shutdown(ctx)
	if err == nil || ctx.Err() == nil {
		return err
	}
	s.abortNow()
	rollback := s.RollbackTimeout
	if rollback <= 0 {
		rollback = DefaultRollbackTimeout
	}
	limit := time.NewTimer(rollback)
	defer limit.Stop()
	for s.inFlight.Load() > 0 {
		select {
		case <-s.handlerDone:
		case <-limit.C:
			return fmt.Errorf("%w: %w; %d request(s) still running after the rollback timeout (%s)", ErrUnfinished, err, s.inFlight.Load(), rollback)
		}
	}
	return err
}

// peerUID is the uid of the process at the other end of c, or -1 when it
// cannot be told (then nobody is allowed).
func peerUID(c net.Conn) int64 {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1
	}
	uid := int64(-1)
	raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			uid = int64(cred.Uid)
		}
	})
	return uid
}

// hungUp reports whether the peer of c has closed its end (or shut down
// its writing): a shim that stopped waiting. It reads nothing, so a body
// not yet read stays unread; net/http notices a hang-up by itself only
// once the body has been read.
func hungUp(c net.Conn) bool {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			gone = fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return gone
}

func (s *Server) allowed(uid int64) bool {
	if uid < 0 {
		return false
	}
	if s.AllowPeer == nil {
		return uid == 0
	}
	return s.AllowPeer(uint32(uid))
}

// handle serves one request; every failure is a CNI error object.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	s.inFlight.Add(1)
	defer func() {
		s.inFlight.Add(-1)
		select {
		case s.handlerDone <- struct{}{}:
		default:
		}
	}()
	start := time.Now()
	seen := seenRequest{steps: requestSteps{head: start}}
	seen.steps.accepted, _ = r.Context().Value(acceptedKey{}).(time.Time)
	acknowledge := func() {
		w.WriteHeader(StatusAcknowledged)
		seen.steps.acknowledged = time.Now()
	}
	out, err := s.serve(w, r, &seen, acknowledge)
	seen.steps.ran = time.Now()
	result, code, status := "ok", uint(0), http.StatusOK
	if err != nil {
		cerr := ErrorFor(err)
		result, code = fmt.Sprint(cerr.Code), cerr.Code
		status = http.StatusInternalServerError
		if errors.Is(err, ErrBadRequest) || errors.Is(err, errForbidden) || errors.Is(err, ErrIncompatibleShim) {
			status = http.StatusBadRequest
		}
		out, _ = json.Marshal(cerr)
	} else if len(out) == 0 {
		out = []byte("{}")
	}
	d := time.Since(start)
	s.logRequest(seen, d, code, err) // before the answer: a runtime that has it finds the request logged and counted
	if s.Observe != nil {
		s.Observe(seen.command(), result, d)
	}
	answer(w, status, out)
	seen.steps.answered = time.Now()
	s.logSteps(seen)
}

// answer writes the final answer whole and flushes it before the handler
// returns: a daemon that exits once its last handler is done (Shutdown)
// must not leave the answer in a buffer.
func answer(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
	http.NewResponseController(w).Flush()
}

// seenRequest is what the log line tells of a request: as much as was
// decoded before it was served or refused.
type seenRequest struct {
	req  *Request
	conf *NetConf
	// queued is how long the request waited for a slot: the part of its
	// duration a busy daemon adds, told apart from the work itself.
	queued time.Duration
	steps  requestSteps
}

// requestSteps are when a request reached each step in the daemon, for
// the debug line that the benchmarks take the hand-off apart with
// (logSteps): its connection accepted, its head read (the handler
// started), acknowledged, a slot taken, its body read and decoded, then
// for ADD and DEL its delegate id known and cninet's operation returned
// (serve), its run ended, its answer written. A step it never reached is
// zero.
type requestSteps struct {
	accepted, head, acknowledged, slot, body time.Time
	serve                                    serveMarks
	ran, answered                            time.Time
}

// logSteps writes the request's steps at debug level, each as Unix
// nanoseconds, after the answer (the request line comes before it).
func (s *Server) logSteps(seen seenRequest) {
	if !s.Logger.IsDebug() {
		return
	}
	fields := []any{"command", seen.command()}
	if seen.req != nil {
		fields = append(fields, "container_id", seen.req.ContainerID)
	}
	st := seen.steps
	for _, step := range []struct {
		name string
		at   time.Time
	}{{"accepted", st.accepted}, {"head", st.head}, {"acknowledged", st.acknowledged}, {"slot", st.slot}, {"body", st.body},
		{"delegated", st.serve.delegated}, {"operated", st.serve.operated}, {"ran", st.ran}, {"answered", st.answered}} {
		if !step.at.IsZero() {
			fields = append(fields, step.name, step.at.UnixNano())
		}
	}
	s.Logger.Debug("request steps", fields...)
}

func (r seenRequest) command() string {
	if r.req == nil || r.req.Command == "" {
		return "unknown"
	}
	return r.req.Command
}

// logRequest writes the request's one log line.
func (s *Server) logRequest(seen seenRequest, d time.Duration, code uint, err error) {
	fields := []any{"command", seen.command()}
	if req := seen.req; req != nil {
		fields = append(fields, "container_id", req.ContainerID, "netns", req.NetNS, "ifname", req.IfName)
		if seen.conf != nil {
			fields = append(fields, "network", seen.conf.Name, "owner", OwnerOf(req, seen.conf))
		}
	}
	fields = append(fields, "duration", d, "queued", seen.queued, "code", code)
	if err != nil {
		s.Logger.Warn("request failed", append(fields, "error", err)...)
		return
	}
	s.Logger.Info("request", fields...)
}

var errForbidden = errors.New("peer not allowed")

// serve checks a request's head, acknowledges it, waits for a slot,
// reads and checks its body, and runs it. A protocol-1 request has no
// head of its own: its body is read first. A request whose shim has
// stopped waiting (past its AckBy when read, or past its Deadline or hung
// up when its slot comes) is refused unrun: the shim has answered the
// runtime already, and for a DEL has run it itself; running it late
// could undo what the runtime did since (an ADD of the same id).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, seen *seenRequest, acknowledge func()) ([]byte, error) {
	if uid, _ := r.Context().Value(peerKey{}).(int64); !s.allowed(uid) {
		return nil, fmt.Errorf("%w: %w: uid %d, only root may send requests", ErrBadRequest, errForbidden, uid)
	}
	if r.Method != http.MethodPost {
		return nil, fmt.Errorf("%w: method %s, want POST", ErrBadRequest, r.Method)
	}
	head, err := s.readHead(r, seen)
	if err != nil {
		return nil, err
	}
	if err := CheckProtocol(head, buildinfo.Version()); err != nil {
		return nil, err
	}
	if s.draining.Load() {
		return nil, fmt.Errorf("%w: draining before exit", ErrBusy)
	}
	if head.AckBy != nil && time.Now().After(*head.AckBy) {
		return nil, fmt.Errorf("%w: %w: read after %s, when the shim stopped waiting (the daemon was stopped or stalled); not run", ErrBusy, errShimGone, head.AckBy.Format(time.RFC3339Nano))
	}
	acknowledge()
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	wait, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	if head.Deadline != nil {
		wait, cancel = context.WithDeadline(wait, *head.Deadline)
		defer cancel()
	}
	queuedAt := time.Now()
	release, err := s.takeSlot(wait, head.Command)
	seen.steps.slot = time.Now()
	seen.queued = seen.steps.slot.Sub(queuedAt)
	if err != nil {
		if r.Context().Err() != nil {
			err = fmt.Errorf("%w: %w", errShimGone, err)
		}
		return nil, fmt.Errorf("%w: not run: no free slot before the request's deadline (daemon's %s, or the shim's): %w", ErrBusy, timeout, err)
	}
	defer release()
	if c, _ := r.Context().Value(connKey{}).(net.Conn); c != nil && hungUp(c) {
		return nil, fmt.Errorf("%w: %w: the shim hung up while the request waited for a slot; not run", ErrBusy, errShimGone)
	}
	if seen.conf == nil { // the head came alone: read the body now, within the deadline
		readBy, _ := wait.Deadline()
		http.NewResponseController(w).SetReadDeadline(readBy)
		if err := s.readBody(r, head, seen); err != nil {
			return nil, err
		}
	}
	seen.steps.body = time.Now()
	req, conf := seen.req, seen.conf
	if s.Gauges != nil {
		s.Gauges.InFlight(req.Command, 1)
		defer s.Gauges.InFlight(req.Command, -1)
	}
	ctx := wait
	if req.Command == CmdDel {
		// Once started, a DEL runs to its end, though the shim hang up: a
		// DEL half done would leave state behind; a shim that runs the DEL
		// itself meanwhile waits for this one's lock on the id.
		var cancelDel context.CancelFunc
		ctx, cancelDel = context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
		defer cancelDel()
	} else {
		// Past the drain timeout, everything else is cut short; an ADD is
		// then rolled back below.
		stop := context.AfterFunc(s.abort, cancel)
		defer stop()
	}
	out, err := s.dispatch(ctx, req, conf, &seen.steps.serve)
	if req.Command == CmdAdd && s.abort.Err() != nil && mayHaveAttached(err) {
		return nil, s.rollBack(req, conf, err)
	}
	return out, err
}

// readHead is the request's head: from its headers (protocol 2), else
// from its body, read and checked at once (protocol 1: seen then holds
// the whole request).
func (s *Server) readHead(r *http.Request, seen *seenRequest) (*Request, error) {
	head, ok, err := RequestHead(r.Header)
	if ok {
		if head != nil {
			seen.req = head
		}
		return head, err
	}
	req, conf, err := DecodeRequest(http.MaxBytesReader(nil, r.Body, MaxRequestBytes+1))
	if req != nil {
		seen.req = req
	}
	if err != nil {
		return nil, err
	}
	seen.conf = conf
	return req, nil
}

// readBody reads and checks the body of a request whose head came first:
// it must say what the head said.
func (s *Server) readBody(r *http.Request, head *Request, seen *seenRequest) error {
	req, conf, err := DecodeRequest(http.MaxBytesReader(nil, r.Body, MaxRequestBytes+1))
	if req != nil {
		seen.req = req
	}
	if err != nil {
		return err
	}
	if err := matchHead(req, head); err != nil {
		return err
	}
	seen.conf = conf
	return nil
}

// rollBack removes the attachment of an ADD the drain timeout cut short:
// the runtime is told it failed, so nothing of it may stay.
func (s *Server) rollBack(req *Request, conf *NetConf, addErr error) error {
	rollback := s.RollbackTimeout
	if rollback <= 0 {
		rollback = DefaultRollbackTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollback)
	defer cancel()
	del := *req
	del.Command = CmdDel
	_, err := s.dispatch(ctx, &del, conf, nil)
	if err != nil {
		return fmt.Errorf("%w: the daemon is exiting and the ADD did not finish within the drain timeout; its rollback failed (a DEL finishes it): %w (the ADD: %v)", ErrBusy, err, addErr)
	}
	return fmt.Errorf("%w: the daemon is exiting and the ADD did not finish within the drain timeout; rolled back (the ADD: %v)", ErrBusy, addErr)
}

// mayHaveAttached reports whether an ADD that returned err may have left
// an attachment of its own: not when it was refused before it ran (a bad
// request, an unknown network, still waiting for another command of its
// container) or found the attachment there already (which is not its to
// remove).
func mayHaveAttached(err error) bool {
	if err == nil {
		return true
	}
	if errors.Is(err, errNotStarted) {
		return false
	}
	switch codeFor(err) {
	case CodeAlreadyAttached, types.ErrInvalidEnvironmentVariables, types.ErrInvalidNetworkConfig, types.ErrDecodingFailure:
		return false
	}
	return true
}

// takeSlot waits, until ctx is done, for a slot of the command's pool.
func (s *Server) takeSlot(ctx context.Context, command string) (release func(), err error) {
	pool, slots := "requests", s.slots
	if command == CmdStatus || command == CmdCheck {
		pool, slots = "probes", s.probeSlots
	}
	if s.Gauges != nil {
		start := time.Now()
		s.Gauges.Queued(pool, 1)
		defer func() {
			s.Gauges.Queued(pool, -1)
			s.Gauges.Waited(pool, time.Since(start))
		}()
	}
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.abort.Done(): // past the drain timeout: what has not started never will
		return nil, errDrainTimedOut
	}
}

// errDrainTimedOut: a request still queued when the drain timeout passed.
var errDrainTimedOut = errors.New("the daemon is exiting: the drain timeout passed before a slot was free")

// dispatch runs a decoded request with the Configurator of its
// network, marking Serve's steps in marks (nil: none).
func (s *Server) dispatch(ctx context.Context, req *Request, conf *NetConf, marks *serveMarks) ([]byte, error) {
	if s.run != nil {
		return s.run(ctx, req, conf)
	}
	if s.Delegates == nil {
		return serve(ctx, s.C, req, conf, marks)
	}
	c, err := s.Delegates.Configurator()
	switch {
	case err == nil:
		return serve(ctx, c, req, conf, marks)
	case req.Command == CmdStatus:
		return nil, fmt.Errorf("%w: %w", cninet.ErrNotReady, err)
	case req.Command != CmdDel:
		return nil, err
	}
	// No conflist at all: a DEL still removes what its ADD made, with
	// the conflist recorded then.
	c, err = ConfiguratorForDel(s.Info, req, conf, s.Logger.Named("cninet"), nil, s.Delegates.tweaks...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return nil, del(ctx, c, req, conf, marks)
}

// errShimGone marks a request the shim stopped waiting for.
var errShimGone = errors.New("the shim stopped waiting")
