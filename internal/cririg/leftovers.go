package cririg

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// KillLeftovers SIGKILLs every pod process (the init.pid of a task's
// bundle, in the task's cgroup) and every containerd shim still running for a task of this
// caller's containerd: a shim is told by its task id and by running in the
// caller's mount namespace, where the bundles are. It returns what it
// killed.
func KillLeftovers() []string {
	bundles, _ := filepath.Glob(filepath.Join(State, "io.containerd.runtime.v2.task", "*", "*"))
	if len(bundles) == 0 {
		return nil
	}
	var killed []string
	kill := func(pid int, what string) {
		if pid > 1 && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, fmt.Sprintf("%s (pid %d)", what, pid))
		}
	}
	ids := map[string]bool{}
	for _, bundle := range bundles {
		ids[filepath.Base(bundle)] = true
		b, err := os.ReadFile(filepath.Join(bundle, "init.pid"))
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		// Only while the pid is still the task's: its cgroup is named
		// after the task id.
		if cgroups, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && strings.Contains(string(cgroups), filepath.Base(bundle)) {
			kill(pid, "task "+filepath.Base(bundle))
		}
	}
	ownMounts, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return killed
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		if mounts, err := os.Readlink(proc + "/ns/mnt"); err != nil || mounts != ownMounts {
			continue
		}
		cmdline, _ := os.ReadFile(proc + "/cmdline")
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-id" && ids[args[i+1]] {
				pid, _ := strconv.Atoi(filepath.Base(proc))
				kill(pid, "shim of "+args[i+1])
			}
		}
	}
	return killed
}

// RemoveCgroups removes the cgroup parent a rig's containers ran under,
// in every hierarchy, deepest first; the error names every cgroup it
// could not remove.
func RemoveCgroups(parent string) error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*" + parent)
	if root := "/sys/fs/cgroup" + parent; exists(root) {
		roots = append(roots, root)
	}
	var errs []error
	for _, root := range roots {
		var dirs []string
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := removeCgroup(dirs[i]); err != nil {
				errs = append(errs, fmt.Errorf("removing the rig's cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroup removes one cgroup directory. A container's last process
// (conmon after `podman rm -f`, a shim after `crictl rmp`) may still be
// exiting when the runtime returns, and the kernel refuses to remove a
// cgroup that holds one (EBUSY): wait for it a bounded while.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := os.Remove(dir)
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
