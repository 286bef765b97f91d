// Package drift holds what cninet's drift check (Check, Drifts, the
// repair watcher) needs of an attachment besides the footprint package:
// the live attachment built from its record, else libcni's cache
// (LiveBuilder), and the repair of what is missing through the plugins'
// own ADD, libcni's cache written again (Repairer).
//
// A drift check compares each live attachment with what its footprint
// says must be there (internal/footprint: Checker), reading the host once
// for all the attachments checked together; a repair restores what is
// missing in place (footprint.Checker.Repair), under the attachment's
// lock, only while its record says it is attached.
//
// Files:
//
//	doc.go     This overview.
//	repair.go  Checked: an attachment as a drift check sees it; LiveBuilder: a checked attachment from its record (CheckedOfRecord); Repairer: a repair of one through the plugins (RepairOne), libcni's cache written again; Result.
package drift
