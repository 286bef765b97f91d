package host

// Links is how the cleaner reaches network devices in the host's network
// namespace (the bandwidth plugin's ifb devices). Tests replace it.
type Links interface {
	// LinkExists reports whether a device of that name exists.
	LinkExists(name string) (bool, error)
	// DeleteLink deletes the device; removed is false when it was not
	// there.
	DeleteLink(name string) (removed bool, err error)
}
