package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// Marker is the environment variable Reexec sets in the child it starts.
// It only says "you were re-executed": Enter believes it only after
// proving that the process runs in network and mount namespaces other
// than its parent's, so an operator's environment holding it changes
// nothing on a host.
const Marker = "CNINET_NETSANDBOX"

// tmpfsDirs hide the host's CNI state and receive the sandbox's: netns
// mounts, host-local reservations (/run/cni) and libcni's cache.
var tmpfsDirs = []string{"/run/netns", "/run/cni", "/var/lib/cni", "/var/lib/cninet"}

// Child reports whether this process says it was started by Reexec
// (Marker is set). Enter checks that it really was.
func Child() bool { return os.Getenv(Marker) == "1" }

// Run runs fn in fresh network and mount namespaces: as root it
// re-executes the binary there with the same arguments and returns the
// child's exit code; in the child, it prepares the namespaces (Enter) and
// runs fn. It fails when the namespaces cannot be had, or when the
// process claims to be the child but runs in its parent's namespaces.
func Run(fn func() int) (int, error) {
	if Child() {
		if err := Enter(); err != nil {
			return 1, err
		}
		return fn(), nil
	}
	if os.Geteuid() != 0 {
		return 1, fmt.Errorf("creating network namespaces needs root")
	}
	return Reexec()
}

// Reexec runs this binary again, with the same arguments, in new network
// and mount namespaces with Marker set, and returns its exit code.
func Reexec() (int, error) {
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), Marker+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	err := cmd.Wait()
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// Enter prepares the namespaces the re-executed child runs in: mounts
// stop propagating to the host, tmpfs covers the CNI state directories,
// and the loopback interface comes up. It first proves that the network
// and mount namespaces are not the parent's (FreshNamespaces) and refuses
// otherwise: tmpfs over the CNI state of a host's own namespace would
// hide every attachment on it.
func Enter() error {
	if err := FreshNamespaces(os.Getppid()); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	for _, dir := range tmpfsDirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			return fmt.Errorf("mounting tmpfs on %s: %w", dir, err)
		}
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("ip link set lo up: %v: %s", err, out)
	}
	return nil
}

// FreshNamespaces returns an error unless this process's network and
// mount namespaces both differ from those of process pid (its parent).
func FreshNamespaces(pid int) error {
	for _, kind := range []string{"net", "mnt"} {
		own, err := os.Readlink("/proc/self/ns/" + kind)
		if err != nil {
			return fmt.Errorf("reading this process's %s namespace: %w", kind, err)
		}
		parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
		if err != nil {
			return fmt.Errorf("reading process %d's %s namespace: %w", pid, kind, err)
		}
		if own == parent {
			return fmt.Errorf("%s=1 is set but this process shares its parent's %s namespace (%s): refusing to mount over its CNI state", Marker, kind, own)
		}
	}
	return nil
}
