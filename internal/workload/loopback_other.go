//go:build !linux

package workload

// LoopbackUp is false off Linux: no namespace is entered.
func LoopbackUp(string) bool { return false }

// SetLoopbackUp does nothing off Linux.
func SetLoopbackUp(string) error { return nil }
