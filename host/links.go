package host

import "net/netip"

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

// LinkInspector is an optional extension of Links: what a drift check
// reads of devices (Check). Without it, devices are not checked, which
// Check reports as a limit of its view rather than as drift.
type LinkInspector interface {
	// ListLinks lists every device of the host's network namespace, in
	// one dump: a check of many attachments reads it once.
	ListLinks() ([]LinkInfo, error)
	// LinkIn returns the device named name in the network namespace
	// mounted at netns, with its addresses; found is false when the
	// namespace has no such device. A namespace that is gone is an error
	// wrapping os.ErrNotExist.
	LinkIn(netns, name string) (link LinkInfo, found bool, err error)
}

// LinkInfo is what a drift check knows of one device.
type LinkInfo struct {
	Name string
	// Master is the name of the device it is enslaved to (a bridge), or
	// "".
	Master string
	// MAC is its hardware address in lower-case colon form, or "".
	MAC string
	// Up says the device is administratively up.
	Up bool
	// Addrs are its addresses with their prefix lengths (LinkIn only;
	// ListLinks leaves them out).
	Addrs []netip.Prefix
}
