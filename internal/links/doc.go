// Package links is cninet's default host.Links: the host namespace's
// network devices over rtnetlink, and what a drift check reads of them
// and of a workload's interface in its namespace (LinkInspector).
//
// # Files
//
//	links_linux.go     New: look a device up by name, delete it
//	inspect_linux.go   ListLinks (one dump, masters named) and LinkIn (a
//	                   device and its addresses in a namespace by path)
//	links_other.go     New off Linux: an error
package links
