package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/buildinfo"
	"github.com/seed1280861d/cninet/internal/thick"
)

// shim runs the CNI commands; its fields are the seams tests replace.
type shim struct {
	stdout io.Writer
	// tweaks change the Config of the in-process DEL's Configurator.
	tweaks []func(*cninet.Config)
	// dialTimeout bounds reaching the daemon (within the silence limit).
	dialTimeout time.Duration
	// answerGrace is how long past the request's deadline the shim still
	// waits for the daemon's final answer.
	answerGrace time.Duration
	// delTimeout bounds the in-process DEL.
	delTimeout time.Duration
}

func newShim(stdout io.Writer) *shim {
	return &shim{stdout: stdout, dialTimeout: 3 * time.Second, answerGrace: thick.AnswerGrace, delTimeout: 2 * time.Minute}
}

// config is what the shim reads of its own config: the conf, the daemon's
// socket and how long command may wait for it.
func config(args *skel.CmdArgs, command string) (*thick.NetConf, string, thick.Limits, error) {
	var conf thick.NetConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return nil, "", thick.Limits{}, types.NewError(types.ErrDecodingFailure, "cninet-shim: config is not a CNI network config", err.Error())
	}
	socket := conf.Socket
	if socket == "" {
		socket = thick.DefaultSocket
	}
	if !filepath.IsAbs(socket) || filepath.Clean(socket) != socket {
		return nil, "", thick.Limits{}, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("cninet-shim: socket %q, want a clean absolute path (like %q): the daemon's info file beside it is found by it", socket, filepath.Clean("/"+socket)), "")
	}
	limits, err := thick.ShimLimits(&conf, command)
	if err != nil {
		return nil, "", thick.Limits{}, types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	return &conf, socket, limits, nil
}

func request(command string, args *skel.CmdArgs) thick.Request {
	return thick.Request{Command: command, ContainerID: args.ContainerID, NetNS: args.Netns, IfName: args.IfName,
		Args: args.Args, Path: args.Path, Config: args.StdinData, Owner: runtimeName()}
}

// runtimeName is the calling runtime's executable name (containerd,
// crio, podman, cnitool …): the owner of its attachments when the shim's
// config names none. "" when it cannot be told.
func runtimeName() string {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", os.Getppid()))
	if err != nil {
		return ""
	}
	name := strings.TrimSuffix(filepath.Base(exe), " (deleted)")
	if thick.CheckOwner(name) != nil {
		return ""
	}
	return name
}

func (s *shim) add(args *skel.CmdArgs) error {
	conf, socket, limits, err := config(args, thick.CmdAdd)
	if err != nil {
		return err
	}
	body, err := s.forward(socket, request(thick.CmdAdd, args), limits)
	if err != nil {
		return noAnswerIs(err, types.ErrTryAgainLater)
	}
	res, err := thick.ConvertResult(body, conf.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "cninet-shim: the daemon's result", err.Error())
	}
	return res.PrintTo(s.stdout)
}

func (s *shim) check(args *skel.CmdArgs) error {
	return s.forwardOnly(args, thick.CmdCheck, types.ErrTryAgainLater)
}
func (s *shim) status(args *skel.CmdArgs) error {
	return s.forwardOnly(args, thick.CmdStatus, types.ErrPluginNotAvailable)
}
func (s *shim) gc(args *skel.CmdArgs) error {
	return s.forwardOnly(args, thick.CmdGC, types.ErrTryAgainLater)
}

// forwardOnly forwards a command whose answer is success or an error;
// a daemon that does not answer is CNI error code.
func (s *shim) forwardOnly(args *skel.CmdArgs, command string, code uint) error {
	_, socket, limits, err := config(args, command)
	if err != nil {
		return err
	}
	_, err = s.forward(socket, request(command, args), limits)
	return noAnswerIs(err, code)
}

// del forwards the DEL; when the daemon gives no answer (cannot be
// reached, silent past the silence limit, or no final answer by the
// deadline), the shim detaches the attachment itself, with the daemon's
// conf dir, plugins, cache and registry: a DEL must never leave state
// behind because a daemon is down or stuck. An answer, error or not, is
// the runtime's: the daemon ran the DEL or decided not to (busy, an
// xtables lock held), and running it here as well would defeat that.
func (s *shim) del(args *skel.CmdArgs) error {
	conf, socket, limits, err := config(args, thick.CmdDel)
	if err != nil {
		return err
	}
	_, err = s.forward(socket, request(thick.CmdDel, args), limits)
	var none *noAnswer
	if !errors.As(err, &none) {
		return err
	}
	if ferr := s.delHere(socket, args, conf); ferr != nil {
		return thick.ErrorFor(fmt.Errorf("cninet-shim: %v; the DEL run in the shim instead failed: %w", err, ferr))
	}
	return nil
}

// delHere is the daemon's DEL, run in this process with the daemon's
// info (thick.ReadInfo: an untrusted one is refused, and then nothing
// runs), under the host registry's locks, which serialise it with a
// daemon that wakes up and runs the same DEL.
func (s *shim) delHere(socket string, args *skel.CmdArgs, conf *thick.NetConf) error {
	req := request(thick.CmdDel, args)
	reqConf, err := decodeOwn(req)
	if err != nil {
		return err
	}
	info, _, err := thick.ReadInfo(socket, filepath.SplitList(args.Path))
	if err != nil {
		return err
	}
	c, err := thick.ConfiguratorForDel(info, &req, reqConf, hclog.NewNullLogger(), nil, s.tweaks...)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), s.delTimeout)
	defer cancel()
	return thick.Del(ctx, c, &req, reqConf)
}

// decodeOwn validates the request as the daemon would.
func decodeOwn(req thick.Request) (*thick.NetConf, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	_, conf, err := thick.DecodeRequest(bytes.NewReader(b))
	return conf, err
}

// noAnswer: the daemon gave no answer to a request: it could not be
// reached (no socket, nobody listening, the dial timed out), it was
// silent past the silence limit (stopped, deadlocked), or it acknowledged
// the request and then sent no final answer before the deadline, or the
// connection broke before one.
type noAnswer struct {
	socket string
	why    string
	err    error
}

func (n *noAnswer) Error() string {
	return fmt.Sprintf("cninet daemon at %s %s: %v", n.socket, n.why, n.err)
}

func (n *noAnswer) Unwrap() error { return n.err }

// noAnswerIs gives a daemon that did not answer the CNI code the command
// calls for; answers (errors the daemon sent) are returned as they are.
func noAnswerIs(err error, code uint) error {
	var none *noAnswer
	if errors.As(err, &none) {
		return types.NewError(code, none.Error(), "is cninet daemon running? (systemctl status cninet)")
	}
	return err
}

// forward posts req to the daemon at socket and returns its answer's
// body; the daemon's CNI error comes back as the *types.Error it sent,
// no answer as a *noAnswer. It waits limits.Silence for the first
// response headers (the daemon's acknowledgement or its answer), then,
// once acknowledged, until the request's deadline (limits.Timeout) plus
// the grace for the final answer. Each limit is a deadline on the
// connection, so a daemon that reads nothing (its socket buffer full)
// cannot block the sending either.
func (s *shim) forward(socket string, req thick.Request, limits thick.Limits) ([]byte, error) {
	start := time.Now()
	ackBy, deadline := start.Add(limits.Silence), start.Add(limits.Timeout)
	req.Protocol, req.ShimVersion, req.AckBy, req.Deadline = thick.ProtocolVersion, buildinfo.Version(), &ackBy, &deadline
	b, err := json.Marshal(req)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "cninet-shim: encoding the request", err.Error())
	}
	conn := &waitedConn{}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: s.dialTimeout, Deadline: ackBy}
			c, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return nil, err
			}
			conn.set(c, ackBy)
			return c, nil
		},
		DisableKeepAlives: true,
	}}
	var acknowledged atomic.Bool
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		if code == thick.StatusAcknowledged {
			acknowledged.Store(true)
			conn.extend(deadline.Add(s.answerGrace))
		}
		return nil
	}}
	post, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, "http://cninet"+thick.RequestPath, bytes.NewReader(b))
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "cninet-shim: the request", err.Error())
	}
	post.Header.Set("Content-Type", "application/json")
	req.SetHead(post.Header) // the daemon queues the request by its head and reads the body once a slot is free
	resp, err := client.Do(post)
	if err != nil {
		return nil, conn.noAnswer(socket, acknowledged.Load(), limits, s.answerGrace, err)
	}
	defer resp.Body.Close()
	conn.extend(time.Now().Add(limits.Silence)) // the body comes with the headers
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, types.NewError(types.ErrTryAgainLater, fmt.Sprintf("cninet daemon at %s answered %s, but the answer was cut short", socket, resp.Status), err.Error())
	}
	if resp.StatusCode == http.StatusOK {
		return body, nil
	}
	cerr := &types.Error{}
	if err := json.Unmarshal(body, cerr); err != nil || cerr.Code == 0 {
		return nil, types.NewError(types.ErrInternal, fmt.Sprintf("cninet daemon at %s answered %s without a CNI error", socket, resp.Status), string(body))
	}
	return nil, cerr
}

// waitedConn is the one connection of a request, once dialed, and the
// deadline the shim waits on it until.
type waitedConn struct {
	mu sync.Mutex
	c  net.Conn
}

func (w *waitedConn) set(c net.Conn, deadline time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.c = c
	c.SetDeadline(deadline)
}

// extend moves the deadline to t.
func (w *waitedConn) extend(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.c != nil {
		w.c.SetDeadline(t)
	}
}

// noAnswer says why a request failed without an answer.
func (w *waitedConn) noAnswer(socket string, acknowledged bool, limits thick.Limits, grace time.Duration, err error) error {
	w.mu.Lock()
	dialed := w.c != nil
	w.mu.Unlock()
	var netErr net.Error
	timedOut := errors.As(err, &netErr) && netErr.Timeout()
	switch {
	case !dialed:
		return &noAnswer{socket: socket, why: "is unreachable", err: err}
	case acknowledged && timedOut:
		return &noAnswer{socket: socket, why: fmt.Sprintf("acknowledged the request but sent no answer within %s", limits.Timeout+grace), err: err}
	case acknowledged:
		return &noAnswer{socket: socket, why: "acknowledged the request, then the connection broke without an answer", err: err}
	case timedOut:
		return &noAnswer{socket: socket, why: fmt.Sprintf("did not answer within %s (stopped or stalled)", limits.Silence), err: err}
	}
	return &noAnswer{socket: socket, why: "closed the connection without an answer", err: err}
}
