package identity

import "fmt"

// Key identifies an attachment: the container ID (CNI_CONTAINERID) whose
// interface IfName (CNI_IFNAME) is in Network. The JSON names are the
// host registry's on-disk format, which must not change.
type Key struct {
	Network string `json:"network"`
	ID      string `json:"containerID"`
	IfName  string `json:"ifName"`
}

// String names the attachment for people: "c1 in network \"web\" as eth0".
func (k Key) String() string {
	return fmt.Sprintf("%s in network %q as %s", k.ID, k.Network, k.IfName)
}
