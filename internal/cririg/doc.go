// Package cririg runs Debian's containerd (1.6) with its CRI plugin, and
// crictl driving it as a kubelet would, inside the network and mount
// namespaces of a caller that already made them (netsandbox): the
// integration tests' containerd rig and the benchmark's cri scenario share
// it.
//
// What these namespaces cannot grant, the rig works around: no registry
// is reachable (the sandbox image is built here from the host's static
// busybox and imported with ctr), no cgroup controller is delegated and
// oom_score_adj cannot be lowered (containerd's runc is a wrapper that
// drops both from the bundle before it runs runc). containerd's state
// lives in tmpfs mounts the caller makes over Root and State.
//
// # Reading order
//
//   - containerd.go: Root, State and Socket, fixed by containerd 1.6;
//     Config, the containerd.toml of a rig; Containerd, a running
//     containerd, started and stopped.
//   - crictl.go: Crictl, crictl against the rig's socket with its own
//     config file; NetworkReady, the CRI plugin's network condition; Info
//     and its PluginTypes, the CNI conflist the CRI plugin has loaded.
//   - image.go: WriteBusyboxLayer and WritePauseImage, a local image
//     tarball that `ctr images import` reads.
//   - runc_wrapper.go: the runc wrapper: WriteRuncWrapper writes the
//     script containerd runs, which runs the caller's own binary, whose
//     main calls RunRuncWrapperIfAsked first.
//   - leftovers.go: KillLeftovers, the pods' processes and shims that
//     outlive containerd, and RemoveCgroups, the pods' cgroup parent.
package cririg
