package host

// Links is how cninet's cleanup reaches the network devices of the host's
// network namespace (the bandwidth plugin's ifb devices). Config.Links
// replaces the default, which speaks rtnetlink; tests give a fake.
type Links interface {
	// LinkExists reports whether a device of that name exists.
	LinkExists(name string) (bool, error)
	// DeleteLink deletes the device; removed is false when it was not
	// there.
	DeleteLink(name string) (removed bool, err error)
}
