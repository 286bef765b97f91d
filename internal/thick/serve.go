package thick

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seed1280861d/cninet"
)

// Serve runs one request through c, for the request's owner (OwnerOf),
// each on the attachment the runtime names (its network and CNI_IFNAME):
// ADD is Connect (then the cached result, in the delegate's CNI version,
// is returned as JSON), DEL is Disconnect (DEL plus force cleanup), CHECK
// is Check (after comparing the runtime's prevResult), STATUS is Status
// of the network and GC is GC narrowed to the request's network, with
// the attachments of cni.dev/valid-attachments live by container id and
// interface name (GCOptions.LiveAttachments). The shim's network name
// names the delegate network, which c must know; an unknown name makes c
// read its conf dir again once, so that a conflist added since is found.
func Serve(ctx context.Context, c Configurator, req *Request, conf *NetConf) ([]byte, error) {
	return serve(ctx, c, req, conf, nil)
}

// serveMarks are when an ADD or a DEL reached its steps in Serve, for
// the daemon's request steps: its delegate id known (delegated), and
// cninet's Connect or Disconnect returned (operated).
type serveMarks struct{ delegated, operated time.Time }

// mark sets *at to now; a nil m marks nothing.
func (m *serveMarks) mark(at func(*serveMarks) *time.Time) {
	if m != nil {
		*at(m) = time.Now()
	}
}

func delegated(m *serveMarks) *time.Time { return &m.delegated }
func operated(m *serveMarks) *time.Time  { return &m.operated }

// serve is Serve, marking its steps in marks (nil: none).
func serve(ctx context.Context, c Configurator, req *Request, conf *NetConf, marks *serveMarks) ([]byte, error) {
	ctx = cninet.WithOwner(ctx, OwnerOf(req, conf))
	if err := knowNetwork(c, conf.Name); err != nil && req.Command != CmdDel {
		return nil, err
	}
	switch req.Command {
	case CmdAdd:
		return add(ctx, c, req, conf, marks)
	case CmdDel:
		return nil, del(ctx, c, req, conf, marks)
	case CmdCheck:
		req, _, err := asDelegateSees(c, req, conf, false)
		if err != nil {
			return nil, err
		}
		return nil, check(ctx, c, req, conf)
	case CmdStatus:
		return nil, c.Status(ctx, conf.Name)
	case CmdGC:
		return nil, gc(ctx, c, conf)
	}
	return nil, fmt.Errorf("%w: command %q, want ADD, DEL, CHECK, STATUS or GC", ErrBadRequest, req.Command)
}

// knowNetwork makes sure c knows network, reading its conf dir again
// when it does not.
func knowNetwork(c Configurator, network string) error {
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

// add is Connect of the attachment under its delegate id. The commands
// of one container wait for each other here (containerLocks), so that
// two interfaces added to one network at once get different ids.
func add(ctx context.Context, c Configurator, req *Request, conf *NetConf, marks *serveMarks) ([]byte, error) {
	unlock, err := containerLocks.Lock(ctx, req.ContainerID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: waiting for another command of container %s: %w", ErrBusy, errNotStarted, req.ContainerID, err)
	}
	defer unlock()
	req, runtimeID, err := asDelegateSees(c, req, conf, true)
	if err != nil {
		return nil, err
	}
	alloc, err := Allocation(req, conf)
	if err != nil {
		return nil, err
	}
	marks.mark(delegated)
	_, err = c.Connect(ctx, alloc, conf.Name, req.NetNS, cninet.ConnectOptions{IfName: req.IfName, RuntimeID: runtimeID})
	marks.mark(operated)
	if err != nil {
		return nil, err
	}
	res, err := c.CachedResult(req.ContainerID, conf.Name, req.IfName)
	if err == nil && res == nil {
		err = fmt.Errorf("%w: libcni cached no result for the attachment", cninet.ErrIO)
	}
	if err != nil {
		return nil, fmt.Errorf("allocation %s attached to network %q, but its result cannot be read: %w", req.ContainerID, conf.Name, err)
	}
	return answerResult(res, conf.CNIVersion)
}

// errNotStarted marks an ADD that returned before anything of it ran:
// there is nothing of it to roll back.
var errNotStarted = errors.New("not started")

// Del is cninet's DEL of one attachment (DEL plus force cleanup), as the
// daemon runs it and as the shim runs it itself when the daemon is down.
// Port mappings or args it cannot parse do not stop it: the cached ones
// (or none) are used, since a DEL must clean up whatever it is given. An
// interface whose id is another container's in the network
// (ErrDelegateIDTaken) has no attachment this daemon could have made:
// nothing runs.
func Del(ctx context.Context, c Configurator, req *Request, conf *NetConf) error {
	return del(ctx, c, req, conf, nil)
}

// del is Del, marking its steps in marks (nil: none).
func del(ctx context.Context, c Configurator, req *Request, conf *NetConf, marks *serveMarks) error {
	unlock, err := containerLocks.Lock(ctx, req.ContainerID)
	if err != nil {
		return fmt.Errorf("%w: waiting for another command of container %s: %w", ErrBusy, req.ContainerID, err)
	}
	defer unlock()
	req, runtimeID, err := asDelegateSees(c, req, conf, false)
	if errors.Is(err, ErrDelegateIDTaken) {
		return nil
	}
	if err != nil {
		return err
	}
	alloc, err := Allocation(req, conf)
	if err != nil {
		alloc = &cninet.Allocation{ID: req.ContainerID}
	}
	ctx = cninet.WithOwner(ctx, OwnerOf(req, conf))
	marks.mark(delegated)
	defer marks.mark(operated)
	return c.Disconnect(ctx, alloc, conf.Name, req.NetNS, cninet.ConnectOptions{IfName: req.IfName, RuntimeID: runtimeID})
}

// gc is GC narrowed to the request's network, with the attachments of
// cni.dev/valid-attachments live by container id and interface name: a
// container's attachment under an interface the runtime did not list is
// collected, though it lists another of the same container. One listed
// without an interface name keeps every interface of its container.
// The attachments are named as the delegate's plugins know them
// (liveDelegateIDs), while the ADDs of containers listed without an
// interface wait.
func gc(ctx context.Context, c Configurator, conf *NetConf) error {
	var whole []string
	for _, a := range conf.ValidAttachments {
		if a.IfName == "" {
			whole = append(whole, a.ContainerID)
		}
	}
	unlock, err := containerLocks.LockAll(ctx, whole)
	if err != nil {
		return fmt.Errorf("%w: waiting for the ADDs of the containers listed: %w", ErrBusy, err)
	}
	defer unlock()
	live, attachments := liveDelegateIDs(c, conf.ValidAttachments)
	if live == nil {
		live = []string{}
	}
	_, err = c.GC(ctx, live, cninet.GCOptions{Networks: []string{conf.Name}, LiveAttachments: attachments})
	return err
}

// asDelegateSees returns req as the delegate's plugins see it, under the
// attachment's delegate id (delegateID): a copy when that is not the
// container id, with the runtime's id for the registry's records
// (ConnectOptions.RuntimeID); "" when it is.
func asDelegateSees(c Configurator, req *Request, conf *NetConf, adding bool) (*Request, string, error) {
	id, err := delegateID(c, req.ContainerID, conf.Name, req.IfName, adding)
	if err != nil || id == req.ContainerID {
		return req, "", err
	}
	r := *req
	r.ContainerID = id
	return &r, req.ContainerID, nil
}
