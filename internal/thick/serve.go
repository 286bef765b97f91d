package thick

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
func Serve(ctx context.Context, c *cninet.Configurator, req *Request, conf *NetConf) ([]byte, error) {
	ctx = cninet.WithOwner(ctx, OwnerOf(req, conf))
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
		return nil, c.Status(ctx, conf.Name)
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
	if _, err := c.Connect(ctx, alloc, conf.Name, req.NetNS, cninet.ConnectOptions{IfName: req.IfName}); err != nil {
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
	ctx = cninet.WithOwner(ctx, OwnerOf(req, conf))
	return c.Disconnect(ctx, alloc, conf.Name, req.NetNS, cninet.ConnectOptions{IfName: req.IfName})
}

// gc is GC narrowed to the request's network, with the attachments of
// cni.dev/valid-attachments live by container id and interface name: a
// container's attachment under an interface the runtime did not list is
// collected, though it lists another of the same container. One listed
// without an interface name keeps every interface of its container.
func gc(ctx context.Context, c *cninet.Configurator, conf *NetConf) error {
	live := []string{}
	var attachments []cninet.GCAttachment
	for _, a := range conf.ValidAttachments {
		if a.IfName == "" {
			live = append(live, a.ContainerID)
			continue
		}
		attachments = append(attachments, cninet.GCAttachment{ID: a.ContainerID, IfName: a.IfName})
	}
	_, err := c.GC(ctx, live, cninet.GCOptions{Networks: []string{conf.Name}, LiveAttachments: attachments})
	return err
}
