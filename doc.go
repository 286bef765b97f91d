// Package cninet gives a workload's network namespace CNI networking the way
// an orchestrator's allocation runner needs it: load or generate a conflist,
// attach the namespace with port mappings, report the address, and detach it
// again without leaving iptables rules, chains or IP reservations behind.
package cninet
