// Package errs holds the error kinds that the packages below package
// cninet wrap, so that errors.Is(err, cninet.ErrInvalidConfig) holds for
// their errors too: package cninet exports each kind as a sentinel of its
// own (its Err… values, whose documentation an importer reads) and ties
// the two together at init (Kind.Export).
//
// Files:
//
//	doc.go   This overview.
//	errs.go  Kind and the kinds: InvalidConfig, NetworkNotFound, PluginMissing, Closed, …; Join.
package errs
