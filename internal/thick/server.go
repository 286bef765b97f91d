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
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/buildinfo"
	"golang.org/x/sys/unix"
)

// Server serves shim requests on a unix socket. It keeps nothing that
// matters in memory: libcni's cache (in the Configurator's CacheDir) and
// the host are the state, so a restarted Server serves attachments made
// before.
type Server struct {
	// C runs the requests.
	C *cninet.Configurator
	// Logger gets one line per failed request. nil: a null logger.
	Logger hclog.Logger
	// MaxConcurrent requests run at once; more wait for a slot until
	// their deadline. 0: DefaultMaxConcurrent.
	MaxConcurrent int
	// Timeout is each request's deadline, its wait for a slot included.
	// 0: DefaultTimeout.
	Timeout time.Duration
	// Observe, when set, is told each request's command, result ("ok" or
	// the CNI error code) and duration.
	Observe func(command, result string, d time.Duration)
	// AllowPeer says whether a peer with this uid may send requests. nil:
	// root only.
	AllowPeer func(uid uint32) bool

	// run serves a decoded request; nil: Serve with C. Tests replace it.
	run func(ctx context.Context, req *Request, conf *NetConf) ([]byte, error)

	once     sync.Once
	slots    chan struct{}
	started  atomic.Bool
	draining atomic.Bool
	http     *http.Server
}

// Defaults of Server's limits: a burst of pod starts queues behind a few
// plugin chains at a time instead of forking hundreds of plugins (and
// their iptables) at once.
const (
	DefaultMaxConcurrent = 16
	DefaultTimeout       = 2 * time.Minute
)

type peerKey struct{}

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
		mux := http.NewServeMux()
		mux.HandleFunc(RequestPath, s.handle)
		s.http = &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				return context.WithValue(ctx, peerKey{}, peerUID(c))
			},
		}
	})
}

// Ready reports whether the server takes requests: serving, and not
// draining.
func (s *Server) Ready() bool { return s.started.Load() && !s.draining.Load() }

// Shutdown stops accepting requests and waits, until ctx is done, for
// the requests in flight to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.draining.Store(true)
	return s.http.Shutdown(ctx)
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
	start := time.Now()
	command := "unknown"
	acknowledge := func() { w.WriteHeader(StatusAcknowledged) }
	out, err := s.serve(r, &command, acknowledge)
	result := "ok"
	if err != nil {
		cerr := ErrorFor(err)
		result = fmt.Sprint(cerr.Code)
		s.Logger.Warn("request failed", "command", command, "code", cerr.Code, "error", err)
		status := http.StatusInternalServerError
		if errors.Is(err, ErrBadRequest) || errors.Is(err, errForbidden) || errors.Is(err, ErrIncompatibleShim) {
			status = http.StatusBadRequest
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(cerr)
	} else {
		w.Header().Set("Content-Type", "application/json")
		if len(out) == 0 {
			out = []byte("{}")
		}
		w.Write(out)
	}
	if s.Observe != nil {
		s.Observe(command, result, time.Since(start))
	}
}

var errForbidden = errors.New("peer not allowed")

// serve checks and decodes a request, acknowledges it, waits for a slot
// and runs it. A request whose shim has stopped waiting (past its AckBy
// when read, or past its Deadline or hung up when its slot comes) is
// refused unrun: the shim has answered the runtime already, and for a
// DEL has run it itself; running it late could undo what the runtime did
// since (an ADD of the same id).
func (s *Server) serve(r *http.Request, command *string, acknowledge func()) ([]byte, error) {
	if uid, _ := r.Context().Value(peerKey{}).(int64); !s.allowed(uid) {
		return nil, fmt.Errorf("%w: %w: uid %d, only root may send requests", ErrBadRequest, errForbidden, uid)
	}
	if r.Method != http.MethodPost {
		return nil, fmt.Errorf("%w: method %s, want POST", ErrBadRequest, r.Method)
	}
	req, conf, err := DecodeRequest(http.MaxBytesReader(nil, r.Body, MaxRequestBytes+1))
	if err != nil {
		return nil, err
	}
	*command = req.Command
	if err := CheckProtocol(req, buildinfo.Version()); err != nil {
		return nil, err
	}
	if s.draining.Load() {
		return nil, fmt.Errorf("%w: draining before exit", ErrBusy)
	}
	if req.AckBy != nil && time.Now().After(*req.AckBy) {
		return nil, fmt.Errorf("%w: %w: read after %s, when the shim stopped waiting (the daemon was stopped or stalled); not run", ErrBusy, errShimGone, req.AckBy.Format(time.RFC3339Nano))
	}
	acknowledge()
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	wait, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	if req.Deadline != nil {
		wait, cancel = context.WithDeadline(wait, *req.Deadline)
		defer cancel()
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	case <-wait.Done():
	}
	if err := wait.Err(); err != nil {
		if r.Context().Err() != nil {
			err = fmt.Errorf("%w: %w", errShimGone, err)
		}
		return nil, fmt.Errorf("%w: not run: no free slot before the request's deadline (daemon's %s, or the shim's): %w", ErrBusy, timeout, err)
	}
	ctx := wait
	if req.Command == CmdDel {
		// Once started, a DEL runs to its end, though the shim hang up: a
		// DEL half done would leave state behind; a shim that runs the DEL
		// itself meanwhile waits for this one's lock on the id.
		var cancelDel context.CancelFunc
		ctx, cancelDel = context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
		defer cancelDel()
	}
	if s.run != nil {
		return s.run(ctx, req, conf)
	}
	return Serve(ctx, s.C, req, conf)
}

// errShimGone marks a request the shim stopped waiting for.
var errShimGone = errors.New("the shim stopped waiting")
