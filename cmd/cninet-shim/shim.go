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
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/thick"
)

// shim runs the CNI commands; its fields are the seams tests replace.
type shim struct {
	stdout io.Writer
	// tweaks change the Config of the in-process DEL's Configurator.
	tweaks []func(*cninet.Config)
	// dialTimeout bounds reaching the daemon.
	dialTimeout time.Duration
	// delTimeout bounds the in-process DEL.
	delTimeout time.Duration
}

func newShim(stdout io.Writer) *shim {
	return &shim{stdout: stdout, dialTimeout: 3 * time.Second, delTimeout: 2 * time.Minute}
}

// config is what the shim reads of its own config.
func config(args *skel.CmdArgs) (*thick.NetConf, string, error) {
	var conf thick.NetConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return nil, "", types.NewError(types.ErrDecodingFailure, "cninet-shim: config is not a CNI network config", err.Error())
	}
	socket := conf.Socket
	if socket == "" {
		socket = thick.DefaultSocket
	}
	if !filepath.IsAbs(socket) {
		return nil, "", types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("cninet-shim: socket %q, want an absolute path", socket), "")
	}
	return &conf, socket, nil
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
	conf, socket, err := config(args)
	if err != nil {
		return err
	}
	body, err := s.forward(socket, request(thick.CmdAdd, args))
	if err != nil {
		return unreachableIs(err, types.ErrTryAgainLater)
	}
	res, err := thick.ConvertResult(body, conf.CNIVersion)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "cninet-shim: the daemon's result", err.Error())
	}
	return res.PrintTo(s.stdout)
}

func (s *shim) check(args *skel.CmdArgs) error {
	_, socket, err := config(args)
	if err != nil {
		return err
	}
	_, err = s.forward(socket, request(thick.CmdCheck, args))
	return unreachableIs(err, types.ErrTryAgainLater)
}

func (s *shim) status(args *skel.CmdArgs) error {
	_, socket, err := config(args)
	if err != nil {
		return err
	}
	_, err = s.forward(socket, request(thick.CmdStatus, args))
	return unreachableIs(err, types.ErrPluginNotAvailable)
}

func (s *shim) gc(args *skel.CmdArgs) error {
	_, socket, err := config(args)
	if err != nil {
		return err
	}
	_, err = s.forward(socket, request(thick.CmdGC, args))
	return unreachableIs(err, types.ErrTryAgainLater)
}

// del forwards the DEL; when the daemon cannot be reached, or is draining
// before it exits, the shim detaches the attachment itself, with the
// daemon's conf dir, plugins and cache: a DEL must never leave state
// behind because a daemon is down.
func (s *shim) del(args *skel.CmdArgs) error {
	conf, socket, err := config(args)
	if err != nil {
		return err
	}
	_, err = s.forward(socket, request(thick.CmdDel, args))
	var down *unreachable
	var cerr *types.Error
	if !errors.As(err, &down) && !(errors.As(err, &cerr) && cerr.Code == types.ErrTryAgainLater) {
		return err
	}
	if ferr := s.delHere(socket, args, conf); ferr != nil {
		return thick.ErrorFor(fmt.Errorf("cninet-shim: daemon at %s not serving (%v), and the in-process DEL failed: %w", socket, err, ferr))
	}
	return nil
}

// delHere is the daemon's DEL, run in this process.
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
	c, err := thick.NewConfigurator(info, hclog.NewNullLogger(), nil, s.tweaks...)
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

// unreachable: the daemon could not be reached at all (no socket, nobody
// listening, connection refused or cut before an answer).
type unreachable struct {
	socket string
	err    error
}

func (u *unreachable) Error() string {
	return fmt.Sprintf("cninet daemon unreachable at %s: %v", u.socket, u.err)
}

func (u *unreachable) Unwrap() error { return u.err }

// unreachableIs gives an unreachable daemon the CNI code the command
// calls for; other errors are returned as they are.
func unreachableIs(err error, code uint) error {
	var down *unreachable
	if errors.As(err, &down) {
		return types.NewError(code, down.Error(), "is cninet daemon running? (systemctl status cninet)")
	}
	return err
}

// forward posts req to the daemon at socket and returns its answer's
// body; the daemon's CNI error comes back as the *types.Error it sent.
func (s *shim) forward(socket string, req thick.Request) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, types.NewError(types.ErrInternal, "cninet-shim: encoding the request", err.Error())
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: s.dialTimeout}
			return d.DialContext(ctx, "unix", socket)
		},
		DisableKeepAlives: true,
	}}
	resp, err := client.Post("http://cninet"+thick.RequestPath, "application/json", bytes.NewReader(b))
	if err != nil {
		return nil, &unreachable{socket: socket, err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, &unreachable{socket: socket, err: fmt.Errorf("reading the answer: %w", err)}
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
