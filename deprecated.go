package cninet

import "github.com/seed1280861d/cninet/host"

// The exported names below were renamed; they stay as aliases so that
// code written against them keeps compiling.

// NetworkAttachment is the status of one network of a workload.
//
// Deprecated: use AttachmentStatus.
type NetworkAttachment = AttachmentStatus

// Network is the legacy per-network port list of an allocation.
//
// Deprecated: use NetworkPorts.
type Network = NetworkPorts

// The seams moved to package host, where go doc shows their method sets;
// the names below are aliases of them.

// IPTables is host.IPTables.
//
// Deprecated: use host.IPTables.
type IPTables = host.IPTables

// TableLister is host.TableLister.
//
// Deprecated: use host.TableLister.
type TableLister = host.TableLister

// Saver is host.Saver.
//
// Deprecated: use host.Saver.
type Saver = host.Saver

// Restorer is host.Restorer.
//
// Deprecated: use host.Restorer.
type Restorer = host.Restorer

// ContextBinder is host.ContextBinder.
//
// Deprecated: use host.ContextBinder.
type ContextBinder = host.ContextBinder

// DefaultLockWait is host.DefaultLockWait.
//
// Deprecated: use host.DefaultLockWait.
const DefaultLockWait = host.DefaultLockWait

// NFTables is host.NFTables.
//
// Deprecated: use host.NFTables.
type NFTables = host.NFTables

// Links is host.Links.
//
// Deprecated: use host.Links.
type Links = host.Links

// NFTable is host.NFTable.
//
// Deprecated: use host.NFTable.
type NFTable = host.NFTable

// NFTRule is host.NFTRule.
//
// Deprecated: use host.NFTRule.
type NFTRule = host.NFTRule
