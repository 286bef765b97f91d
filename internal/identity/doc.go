// Package identity names an attachment: one container's interface in one
// network. Every layer that speaks of a single attachment (the host
// registry's records and listings, GC's reports, the daemon's delegate
// ids) uses its Key, so that the id is spelled ID and the interface
// IfName everywhere.
//
// Files:
//
//	doc.go  This overview.
//	key.go  Key: network, container id, interface; its on-disk names.
package identity
