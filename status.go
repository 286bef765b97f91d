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
//
// Given networks, Status checks only those: a network this Configurator
// does not know is then an ErrNetworkNotFound error.
func (c *Configurator) Status(ctx context.Context, networks ...string) (err error) {
	if len(networks) > 0 {
		return c.statusOf(ctx, networks)
	}
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

// statusOf is Status of the given networks only.
func (c *Configurator) statusOf(ctx context.Context, networks []string) (err error) {
	ctx, op := c.tel.startOp(ctx, opStatus, "", "")
	defer func() { op.end(err) }()
	def, err := c.nets.current()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	var errs []error
	for _, network := range networks {
		conf, err := c.nets.known(network, false)
		if err != nil {
			return err
		}
		err = c.networkReady(ctx, conf, conf.info.name == def.info.name)
		c.tel.noteReady(network, err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrNotReady, joinErrors(errs))
	}
	return nil
}
