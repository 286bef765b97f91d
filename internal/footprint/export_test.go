package footprint

// SetCrashAt makes every atomic write stop at the step where f returns an
// error, as a process killed there would; the func returned undoes it.
func SetCrashAt(f func(step string) error) (undo func()) {
	crashAt = f
	return func() { crashAt = nil }
}
