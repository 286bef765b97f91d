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
//     the benchmark) re-execute the binary in new network and mount
//     namespaces with tmpfs over the CNI state directories, through
//     internal/sandbox, which does the work without package testing (the
//     cninet demo uses it directly); Require and Unavailable skip a test
//     that cannot run there, or fail it when CI=true.
//   - workload.go: Workload (internal/sandbox's) and NewWorkload, a
//     workload namespace removed when the test ends.
//   - plugins.go: PluginSets, the installed sets of CNI reference plugins (a missing set left out alone: a failure under CI); AllPluginSets and Missing
//     (and backends) the suite runs against.
//   - audit.go: Snapshot, TakeSnapshot and Leaks, internal/sandbox's
//     audit of what tests leave on a host, under the names the tests use.
//   - build.go: RepoRoot, and BuildPlugin and BuildCommand, which compile
//     a test plugin or a command once per test binary; BuildShim, the
//     cninet-shim with the cninet it runs its own DEL with beside it.
package netsandbox
