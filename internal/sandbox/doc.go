// Package sandbox runs a function in throwaway network and mount
// namespaces, with tmpfs over the CNI state directories, so that nothing
// it attaches ever reaches the host; and audits what attachments leave
// behind. It is what `cninet demo` needs, and it does not import package
// testing: internal/netsandbox builds the integration tests' sandbox on
// it.
//
// # Reading order
//
//   - run.go: Run re-executes the binary in new namespaces (Reexec) and,
//     in the child, prepares them (Enter) after proving they are not the
//     parent's (FreshNamespaces): the child's marker in an operator's
//     environment mounts nothing.
//   - workload.go: Workload, a network namespace standing in for a
//     workload, and its Delete, as a runtime does when a workload dies.
//   - audit.go: Snapshot of what attachments can leave on a host
//     (iptables and nftables rules, CNI state files, links) and Leaks,
//     what a later Snapshot holds beyond a baseline that is not shared
//     infrastructure.
package sandbox
