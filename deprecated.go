package cninet

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
