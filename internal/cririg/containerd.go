package cririg

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Fixed by containerd 1.6: its shims' sockets are under /run/containerd
// whatever the configured state dir, so the whole of it must be the
// caller's tmpfs, and so must its root. The pods' network namespaces are
// mounted under /var/run/netns, which the sandbox covers already.
const (
	Root   = "/var/lib/containerd"
	State  = "/run/containerd"
	Socket = State + "/containerd.sock"
)

// Config is what differs between rigs in containerd's configuration.
type Config struct {
	SandboxImage string // the pause image's reference, imported beforehand
	RuncBinary   string // the runc wrapper (WriteRuncWrapper)
	CNIBinDir    string // the CRI plugin's CNI plugin directory
	CNIConfDir   string // the CRI plugin's CNI conf dir; it loads one conflist
}

// TOML is containerd's configuration file for c: state under Root and
// State, the native snapshotter (the only one that works in a tmpfs), and
// the snapshotters and tracing that cannot start there disabled.
func (c Config) TOML() string {
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.overlayfs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
    max_conf_num = 1
`, Root, State, Socket, c.SandboxImage, c.RuncBinary, c.CNIBinDir, c.CNIConfDir)
}

// Containerd is a running containerd.
type Containerd struct {
	cmd    *exec.Cmd
	exited chan error
}

// StartContainerd runs containerd on the configuration file config,
// appending its output to the file log. It does not wait for it to
// serve: poll Crictl.NetworkReady, and Exited meanwhile.
func StartContainerd(config, log string) (*Containerd, error) {
	out, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	c := &Containerd{cmd: exec.Command("containerd", "--config", config, "--log-level", "warn"), exited: make(chan error, 1)}
	c.cmd.Stdout, c.cmd.Stderr = out, out
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting containerd: %w", err)
	}
	go func() { c.exited <- c.cmd.Wait() }()
	return c, nil
}

// Exited receives containerd's exit status once it has exited.
func (c *Containerd) Exited() <-chan error { return c.exited }

// Kill SIGKILLs containerd and waits for it; its shims, and so the pods,
// live on.
func (c *Containerd) Kill() {
	c.cmd.Process.Kill()
	<-c.exited
}

// Stop sends SIGTERM and waits up to timeout for containerd to exit; past
// it, containerd is killed and Stop returns an error saying so.
func (c *Containerd) Stop(timeout time.Duration) error {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return nil
	case <-time.After(timeout):
		c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("containerd did not exit within %s of SIGTERM", timeout)
	}
}
