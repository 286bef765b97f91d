package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/cririg"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"golang.org/x/sys/unix"
)

// Podman (Debian's package, its CNI backend) runs a container on a shim
// network: `podman run -p` answers on the mapped port through the cninet
// daemon's delegate, and `podman rm -f` leaves no rule, reservation or
// cache file. Podman keeps its storage, runtime state and locks in
// directories of this test (tmpfs over the fixed ones), its image is a
// local busybox imported from a tarball (no registry), and its container
// runs under a cgroup parent the test removes.
func TestThickPodman(t *testing.T) {
	netsandbox.Require(t)
	for _, tool := range []string{"podman", "runc", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			netsandbox.Unavailable(t, tool+" is not installed (apt-get install podman runc busybox-static): "+err.Error())
		}
	}
	set := netsandbox.PluginSets(t)[0]
	r := newThickRig(t, set, "0.4.0", false) // Podman writes 0.4.0 conflists
	privateTmpfs(t, "/dev/shm", "/run/runc", "/run/libpod", "/run/containers", "/var/lib/containers")
	tmp := t.TempDir()
	image := filepath.Join(tmp, "busybox.tar")
	if err := cririg.WriteBusyboxLayer(image); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(tmp, "containers.conf")
	writeFile(t, conf, fmt.Sprintf(`[network]
network_backend = "cni"
cni_plugin_dirs = [%q]
network_config_dir = %q
[engine]
cgroup_manager = "cgroupfs"
events_logger = "none"
runtime = "runc"
tmp_dir = %q
`, r.shimDir, r.netDir, filepath.Join(tmp, "libpod")))
	cgroupParent := fmt.Sprintf("/cninet-thick-test-%d", os.Getpid())
	t.Cleanup(func() { removeCgroups(t, cgroupParent) })
	podman := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("podman", append([]string{"--root", filepath.Join(tmp, "root"), "--runroot", filepath.Join(tmp, "runroot"),
			"--storage-driver", "vfs"}, args...)...)
		cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	podman("import", image, "localhost/busybox:thick")
	base := baseline(t)
	// The container's limits stay below this host's: raising one needs
	// CAP_SYS_RESOURCE, which a sandboxed runner may lack.
	podman("run", "-d", "--name", "thick-web", "--network", r.name(), "-p", "28601:8080", "--cgroup-parent", cgroupParent,
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"localhost/busybox:thick", "sh", "-c", "echo hello from podman > /tmp/index.html; exec httpd -f -p 8080 -h /tmp")
	body, err := fetch(r.nw.gw4, 28601)
	if err != nil || body != "hello from podman\n" {
		podman("rm", "-f", "-t", "0", "thick-web")
		t.Fatalf("podman's mapped port 28601 from the host side: %q, %v", body, err)
	}
	podman("rm", "-f", "-t", "0", "thick-web")
	assertNoLeaks(t, base, r.nw.allowance())
}

// privateTmpfs mounts a tmpfs over each dir for the rest of the test, in
// the sandbox's own mount namespace; a dir it had to create (the mount
// point is on the host's filesystem) is removed again.
func privateTmpfs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		created := !exists(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatalf("mounting a tmpfs over %s: %v", dir, err)
		}
		t.Cleanup(func() {
			unix.Unmount(dir, unix.MNT_DETACH)
			if created {
				os.Remove(dir)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// removeCgroups removes the cgroup parent the test's containers ran
// under (cririg.RemoveCgroups), failing the test on what it cannot remove.
func removeCgroups(t *testing.T, parent string) {
	if err := cririg.RemoveCgroups(parent); err != nil {
		t.Error(err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
