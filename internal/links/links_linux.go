package links

import (
	"errors"

	"github.com/seed1280861d/cninet/host"
	"github.com/vishvananda/netlink"
)

// hostLinks is the default Links: rtnetlink in the caller's namespace.
type hostLinks struct{}

// New opens the host's network devices.
func New() (host.Links, error) { return hostLinks{}, nil }

func (hostLinks) LinkExists(name string) (bool, error) {
	_, err := netlink.LinkByName(name)
	if err == nil {
		return true, nil
	}
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return false, nil
	}
	return false, err
}

func (hostLinks) DeleteLink(name string) (bool, error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return false, nil
		}
		return false, err
	}
	if err := netlink.LinkDel(link); err != nil {
		return false, err
	}
	return true, nil
}
