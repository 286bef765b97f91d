// Package links is cninet's default host.Links: the host namespace's
// network devices over rtnetlink.
//
// # Files
//
//	links_linux.go   New: look a device up by name, delete it
//	links_other.go   New off Linux: an error
package links
