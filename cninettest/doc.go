// Package cninettest lets a program that uses cninet unit-test the code
// around it (an orchestrator's allocation runner, say) without root and
// without CNI plugins, as net/http/httptest does for HTTP: New returns a
// Config wired to an in-memory host and to a fake CNI whose Setup and
// Remove act on that host as the bridge, portmap, firewall and
// host-local plugins would. The test then sees the addresses handed
// out, the rules each allocation has, and whether Teardown left any.
//
//	env, err := cninettest.New(t.TempDir())
//	c, err := cninet.New(env.Config)
//	... // run the code under test
//	if left := env.Host.Leftovers(env.CNI.Footprints(id)[0]); len(left) > 0 { ... }
//
// The fakes themselves are in cninettest/fakes, which cninet's own tests
// use too; this package only assembles them, and imports neither package
// testing nor anything that touches the host.
//
// # Files
//
//	env.go   Env and New: a Config on the fakes, Network and Subnet
package cninettest
