package cninet

import (
	"context"
	"fmt"
)

// Status reports whether this Configurator can attach workloads now, in
// every network it knows: the conflists are loaded, every plugin they name
// is in the plugin dirs and supports the conflist's cniVersion, a plugin
// asked for an nftables backend has one (ErrInvalidConfig naming the
// plugin otherwise), and the CNI 1.1 STATUS command (for conflists of that
// version) passes. The error (ErrNotReady, plus ErrPluginMissing when a
// plugin is absent) names each network that is not ready and what is
// wrong with it. Suitable for a node fingerprint.
func (c *Configurator) Status(ctx context.Context) (err error) {
	ctx, op := c.tel.startOp(ctx, opStatus, "", "")
	defer func() { op.end(err) }()
	def, err := c.nets.current()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	var errs []error
	for _, conf := range c.nets.all(false) {
		err := c.networkReady(ctx, conf, conf.info.name == def.info.name)
		c.tel.noteReady(conf.info.name, err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrNotReady, joinErrors(errs))
	}
	return nil
}

// networkReady is Status for one network. The default network's STATUS
// goes through Config.CNI, like its other commands.
func (c *Configurator) networkReady(ctx context.Context, conf networkConf, isDefault bool) (err error) {
	ctx, op := c.tel.startNetwork(ctx, opStatusNetwork, conf.info.name, "", "", "")
	defer func() { op.end(err) }()
	if err := c.plugins.missing(conf); err != nil {
		return err
	}
	if err := c.plugins.checkBackends(ctx, conf.list); err != nil {
		return err
	}
	if _, err := c.lib.ValidateNetworkList(ctx, conf.list); err != nil {
		return fmt.Errorf("network %q: %w", conf.info.name, err)
	}
	if isDefault {
		if err := c.cni.Status(); err != nil {
			return fmt.Errorf("network %q: CNI STATUS: %w", conf.info.name, err)
		}
	} else if err := c.lib.GetStatusNetworkList(ctx, conf.list); err != nil {
		return fmt.Errorf("network %q: CNI STATUS: %w", conf.info.name, err)
	}
	return nil
}

// StatusOf is Status for one network: its conflist, its plugins, their
// nftables backends and the CNI STATUS command. A network this Configurator
// does not know is ErrNetworkNotFound; one that is not ready ErrNotReady
// (with ErrPluginMissing when a plugin is absent).
func (c *Configurator) StatusOf(ctx context.Context, network string) (err error) {
	ctx, op := c.tel.startOp(ctx, opStatus, "", "")
	defer func() { op.end(err) }()
	conf, err := c.nets.known(network, false)
	if err != nil {
		return err
	}
	err = c.networkReady(ctx, conf, false)
	c.tel.noteReady(network, err)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	return nil
}
