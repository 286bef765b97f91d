package thick

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
)

// Serve runs one request through c: ADD is ConnectWith (then the cached
// result, in the delegate's CNI version, is returned as JSON), DEL is
// DisconnectWith (DEL plus force cleanup), CHECK is CheckWith, STATUS is
// StatusOf and GC is GCWith narrowed to the request's network, with the
// containers of cni.dev/valid-attachments live. The shim's network name
// names the delegate network, which c must know; an unknown name makes c
// read its conf dir again once, so that a conflist added since is found.
func Serve(ctx context.Context, c *cninet.Configurator, req *Request, conf *NetConf) ([]byte, error) {
	if err := knowNetwork(c, conf.Name); err != nil && req.Command != CmdDel {
		return nil, err
	}
	switch req.Command {
	case CmdAdd:
		return add(ctx, c, req, conf)
	case CmdDel:
		return nil, Del(ctx, c, req, conf)
	case CmdCheck:
		return nil, check(ctx, c, req, conf)
	case CmdStatus:
		return nil, c.StatusOf(ctx, conf.Name)
	case CmdGC:
		return nil, gc(ctx, c, conf)
	}
	return nil, fmt.Errorf("%w: command %q, want ADD, DEL, CHECK, STATUS or GC", ErrBadRequest, req.Command)
}

// knowNetwork makes sure c knows network, reading its conf dir again
// when it does not.
func knowNetwork(c *cninet.Configurator, network string) error {
	if slices.Contains(c.Networks(), network) {
		return nil
	}
	if err := c.Reload(); err != nil {
		return err
	}
	if !slices.Contains(c.Networks(), network) {
		return fmt.Errorf("%w: no delegate conflist named %q (known: %s)", cninet.ErrNetworkNotFound, network, strings.Join(c.Networks(), ", "))
	}
	return nil
}

func add(ctx context.Context, c *cninet.Configurator, req *Request, conf *NetConf) ([]byte, error) {
	alloc, err := Allocation(req, conf)
	if err != nil {
		return nil, err
	}
	if _, err := c.ConnectWith(ctx, alloc, conf.Name, req.NetNS, cninet.ConnectOptions{IfName: req.IfName}); err != nil {
		return nil, err
	}
	res, err := c.CachedResult(req.ContainerID, conf.Name, req.IfName)
	if err == nil && res == nil {
		err = fmt.Errorf("%w: libcni cached no result for the attachment", cninet.ErrIO)
	}
	if err != nil {
		return nil, fmt.Errorf("allocation %s attached to network %q, but its result cannot be read: %w", req.ContainerID, conf.Name, err)
	}
	var out strings.Builder
	if err := res.PrintTo(&out); err != nil {
		return nil, fmt.Errorf("%w: encoding the result: %w", cninet.ErrIO, err)
	}
	return []byte(out.String()), nil
}

// Del is cninet's DEL of one attachment (DEL plus force cleanup), as the
// daemon runs it and as the shim runs it itself when the daemon is down.
// Port mappings or args it cannot parse do not stop it: the cached ones
// (or none) are used, since a DEL must clean up whatever it is given.
func Del(ctx context.Context, c *cninet.Configurator, req *Request, conf *NetConf) error {
	alloc, err := Allocation(req, conf)
	if err != nil {
		alloc = &cninet.Allocation{ID: req.ContainerID}
	}
	return c.DisconnectWith(ctx, alloc, conf.Name, req.NetNS, cninet.ConnectOptions{IfName: req.IfName})
}

// check is CHECK; a CHECK cninet cannot perform (ErrCheckUnsupported) is
// no verdict on the attachment, so it passes.
func check(ctx context.Context, c *cninet.Configurator, req *Request, conf *NetConf) error {
	alloc, err := Allocation(req, conf)
	if err != nil {
		return err
	}
	err = c.CheckWith(ctx, alloc, conf.Name, req.NetNS, cninet.ConnectOptions{IfName: req.IfName})
	if errors.Is(err, cninet.ErrCheckUnsupported) && !errors.Is(err, cninet.ErrCheckFailed) {
		return nil
	}
	return err
}

func gc(ctx context.Context, c *cninet.Configurator, conf *NetConf) error {
	live := make([]string, 0, len(conf.ValidAttachments))
	for _, a := range conf.ValidAttachments {
		live = append(live, a.ContainerID)
	}
	_, err := c.GCWith(ctx, live, cninet.GCOptions{Networks: []string{conf.Name}})
	return err
}

// The error codes the daemon answers with besides the CNI spec's own
// (a delegate plugin's code always passes through unchanged).
const (
	CodeAlreadyAttached uint = 100 // ADD of an attachment that exists
	CodeCheckFailed     uint = 101 // CHECK found the attachment unhealthy
	CodeCleanupFailed   uint = 102 // DEL or GC could not remove everything
	CodeSetupFailed     uint = 103 // ADD failed without a plugin's error code
)

// ErrorFor turns an error of Serve or DecodeRequest into the CNI error the
// runtime sees. A delegate plugin's CNI error keeps its code and message
// (cninet's account of it goes to Details); cninet's own errors get the
// spec's code where one fits (4 bad environment, 6 undecodable, 7 bad
// network config, 11 try again later, 50 not ready) and the codes above
// otherwise.
func ErrorFor(err error) *types.Error {
	if err == nil {
		return nil
	}
	var plugin *types.Error
	if errors.As(err, &plugin) {
		return &types.Error{Code: plugin.Code, Msg: plugin.Msg, Details: err.Error()}
	}
	return &types.Error{Code: codeFor(err), Msg: err.Error()}
}

func codeFor(err error) uint {
	switch {
	case errors.Is(err, errMalformed):
		return types.ErrDecodingFailure
	case errors.Is(err, ErrBadRequest), errors.Is(err, cninet.ErrInvalidAllocation), errors.Is(err, cninet.ErrInvalidArgument):
		return types.ErrInvalidEnvironmentVariables
	case errors.Is(err, cninet.ErrNotReady):
		return types.ErrPluginNotAvailable
	case errors.Is(err, cninet.ErrNetworkNotFound), errors.Is(err, cninet.ErrInvalidConfig), errors.Is(err, cninet.ErrPluginMissing):
		return types.ErrInvalidNetworkConfig
	case errors.Is(err, ErrBusy), errors.Is(err, context.DeadlineExceeded), errors.Is(err, cninet.ErrXtablesLock):
		return types.ErrTryAgainLater
	case errors.Is(err, cninet.ErrAlreadyAttached):
		return CodeAlreadyAttached
	case errors.Is(err, cninet.ErrCheckFailed):
		return CodeCheckFailed
	case errors.Is(err, cninet.ErrCleanupFailed):
		return CodeCleanupFailed
	case errors.Is(err, cninet.ErrSetupFailed), errors.Is(err, cninet.ErrNoAddress):
		return CodeSetupFailed
	}
	return types.ErrInternal
}

// ErrBusy: the daemon is draining or the request's deadline passed while
// it waited for a slot; the runtime should try again later.
var ErrBusy = errors.New("cninet daemon busy")

// errMalformed marks a body that is not JSON of the request's shape.
var errMalformed = errors.New("malformed JSON")
