package cririg

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Crictl runs crictl against the rig's containerd, with a config file of
// its own so that it reads none of the host's.
type Crictl struct {
	Bin, Config string
	Timeout     time.Duration // per command
}

// NewCrictl writes crictl's config file at config (the rig's socket as
// runtime and image endpoint) and returns a Crictl running bin with it.
func NewCrictl(bin, config string, timeout time.Duration) (*Crictl, error) {
	err := os.WriteFile(config, []byte(fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", Socket, Socket)), 0o644)
	if err != nil {
		return nil, err
	}
	return &Crictl{Bin: bin, Config: config, Timeout: timeout}, nil
}

// Run runs crictl with args and returns its standard output; the error
// carries its standard error.
func (c *Crictl) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Bin, append([]string{"--config", c.Config}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("crictl %s: %v: %s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// Info is the part of `crictl info` the rigs read: the runtime's
// conditions, and the CNI configuration the CRI plugin has loaded.
type Info struct {
	Status struct {
		Conditions []struct {
			Type   string
			Status bool
		}
	}
	CNIConfig struct {
		Networks []struct {
			Config struct {
				Name    string
				Plugins []struct {
					Network struct{ Type string }
				}
			}
		}
	} `json:"cniconfig"`
}

// Info runs `crictl info` and decodes it.
func (c *Crictl) Info() (Info, error) {
	var info Info
	out, err := c.Run("info")
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return info, fmt.Errorf("crictl info: %w: %s", err, out)
	}
	return info, nil
}

// NetworkReady returns nil once the CRI plugin answers and reports its
// network ready (it has loaded a CNI conflist).
func (c *Crictl) NetworkReady() error {
	info, err := c.Info()
	if err != nil {
		return err
	}
	for _, cond := range info.Status.Conditions {
		if cond.Type == "NetworkReady" && cond.Status {
			return nil
		}
	}
	return fmt.Errorf("the CRI plugin's NetworkReady is not true: %+v", info.Status.Conditions)
}

// PluginTypes lists the plugin types of every network the CRI plugin has
// loaded, in order, each network's joined by "+": e.g. ["loopback",
// "cninet-shim"] (containerd's own loopback network comes first).
func (i Info) PluginTypes() []string {
	var nets []string
	for _, n := range i.CNIConfig.Networks {
		var types []string
		for _, p := range n.Config.Plugins {
			types = append(types, p.Network.Type)
		}
		nets = append(nets, strings.Join(types, "+"))
	}
	return nets
}
