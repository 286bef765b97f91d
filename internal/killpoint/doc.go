// Package killpoint names the points inside cninet's operations that the
// plugins' commands do not mark, at which the crash tests kill a process
// (integration/crashmatrix_test.go): after the host registry's record is
// written, before the plugins run; inside a cleanup, after its rules
// went and after its files went. A process that sets no hook passes
// every point at the cost of one atomic load.
//
// Files:
//
//	killpoint.go  Reached, SetHook, and the points' names
package killpoint
