// Package netsandbox runs integration tests in a network namespace and a
// mount namespace of their own, so that no rule, bridge, reservation or
// cache file they create ever reaches the host; and audits what tests
// leave behind.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { netsandbox.Main(m) }
//
// and begin every integration test with netsandbox.Require(t).
//
// # Reading order
//
//   - sandbox.go: the sandbox: Main (for tests) and Run (for a program,
//     the cninet demo) re-execute the binary in new network and mount
//     namespaces with tmpfs over the CNI state directories; Require and
//     Unavailable skip a test that cannot run there, or fail it when
//     CI=true.
//   - workload.go: Workload, a network namespace standing in for a
//     workload, and its Delete, as a runtime does when a workload dies.
//   - plugins.go: PluginSets, the installed sets of CNI reference plugins
//     (and backends) the suite runs against.
//   - audit.go: Snapshot of what attachments can leave on a host
//     (iptables and nftables rules, CNI state files, links) and Leaks,
//     what a later Snapshot holds beyond a baseline that is not shared
//     infrastructure.
//   - build.go: RepoRoot, and BuildPlugin and BuildCommand, which compile
//     a test plugin or a command once per test binary.
package netsandbox
