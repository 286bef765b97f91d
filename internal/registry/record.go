package registry

import (
	"encoding/json"
	"fmt"
	"github.com/seed1280861d/cninet/internal/identity"
	"net/netip"
	"time"
)

// FormatVersion is the version of the record format this package writes.
// A record of a later version is kept and reported, never rewritten or
// removed: a newer cninet on the same host wrote it.
const FormatVersion = 1

// State is how far an attachment got.
type State string

const (
	// Adding: the record was written before the ADD; the ADD may have run
	// in part, all or not at all.
	Adding State = "adding"
	// Attached: the ADD succeeded; Addresses are the result's.
	Attached State = "attached"
	// Detaching: a DEL began; the record holds every proof its cleanup
	// needs, and goes when the cleanup finds nothing left.
	Detaching State = "detaching"
)

// Record is one attachment as the registry knows it: one container on one
// network as one interface, whose it is, and everything a DEL and its
// cleanup need, durably, whatever process runs them and whenever the one
// that wrote it died.
type Record struct {
	// Version is the record format's (FormatVersion when written here).
	Version int `json:"version"`
	// Owner names whose attachment this is (Config.Owner): a GC collects
	// only its own owner's.
	Owner string `json:"owner"`
	// Key identifies the attachment: network, container id, interface.
	identity.Key
	// RuntimeID is the container id the runtime named, where the plugins
	// know the attachment by another (cninet daemon's delegate id for a
	// container's second interface on a network); "": ID is the
	// runtime's.
	RuntimeID string `json:"runtimeID,omitempty"`
	// ViaCNI says the ADD ran through the Configurator's go-cni
	// (Config.CNI: the default network as the first interface of a
	// Setup), not through libcni directly: a repair of it runs the
	// plugins the same way, and an injected Config.CNI may cache its
	// result where cninet does not look.
	ViaCNI bool `json:"viaCNI,omitempty"`
	// CacheDir is the libcni cache directory the ADD's process cached its
	// result in: a drift check by another process (the CLI, another
	// runtime's) looks for it there. "": the default, /var/lib/cni.
	CacheDir string `json:"cacheDir,omitempty"`
	// NetNS is the namespace path the ADD was given.
	NetNS string `json:"netns,omitempty"`
	// NetNSInode is the inode of that namespace when the ADD ran (0:
	// unknown): a later DEL may enter the namespace at NetNS only while it
	// is still the same one, not another workload's mounted at a path
	// that was reused.
	NetNSInode uint64 `json:"netnsInode,omitempty"`
	// Boot is the boot the attachment was made in (the kernel's boot id,
	// CurrentBoot; "": unknown, a record of an older cninet). A record
	// of an earlier boot is dead whoever owns it (FromEarlierBoot): no
	// namespace survives a reboot.
	Boot string `json:"boot,omitempty"`
	// State is how far the attachment got.
	State State `json:"state"`
	// Addresses are what the attachment provably held: the ADD's result's,
	// and every address a cleanup read as proof before a DEL that erases
	// it (a reservation, a cached result).
	Addresses []netip.Addr `json:"addresses,omitempty"`
	// Result is the CNI result the ADD returned (its cniVersion inside):
	// a drift check expects what it names, and a repair hands it to the
	// plugins as prevResult and writes libcni's cache from it. Records of
	// older versions have none.
	Result json.RawMessage `json:"result,omitempty"`
	// Args are the CNI args of the attachment's commands.
	Args [][2]string `json:"args,omitempty"`
	// Capabilities are the capability args its plugins were given
	// (portMappings, …), as libcni passes them.
	Capabilities map[string]json.RawMessage `json:"capabilities,omitempty"`
	// ConfList is the exact conflist the ADD ran with: a DEL after the
	// conflist changed or went runs with it.
	ConfList []byte `json:"confList,omitempty"`
	// Plugins are the conflist's plugins in order, each with the backend
	// it really used on this host ("" where it has none).
	Plugins []Plugin `json:"plugins,omitempty"`
	// Since is when the record was first written; Updated when last.
	Since   time.Time `json:"since"`
	Updated time.Time `json:"updated"`

	path string // where it was read from or written to
}

// Plugin is one plugin of a recorded attachment's chain.
type Plugin struct {
	Type    string `json:"type"`
	Backend string `json:"backend,omitempty"`
}

// Path is the file the record was read from or written to.
func (r Record) Path() string { return r.path }

// AddAddresses adds addrs to what the record proves and reports whether
// any was new.
func (r *Record) AddAddresses(addrs ...netip.Addr) bool {
	added := false
	for _, a := range addrs {
		if !a.IsValid() || containsAddr(r.Addresses, a) {
			continue
		}
		r.Addresses = append(r.Addresses, a)
		added = true
	}
	return added
}

func containsAddr(addrs []netip.Addr, a netip.Addr) bool {
	for _, b := range addrs {
		if a == b {
			return true
		}
	}
	return false
}

// FromEarlierBoot reports whether r was written in an earlier boot of
// this host than the running one: its namespace is gone, whoever owns it.
// A record that names no boot, or a host whose boot id cannot be read,
// is never judged so.
func (r Record) FromEarlierBoot() bool {
	now := CurrentBoot()
	return r.Boot != "" && now != "" && r.Boot != now
}

// Damaged is a file in the registry that is no record this version can
// use: unreadable, corrupt, or of a later format. It is kept: what it
// held may be the only proof of an attachment's state.
type Damaged struct {
	Path string
	// Key is the attachment the path names: its IfName is empty where a
	// network's directory is damaged, and its Network too where the id's
	// is (Covers). Its ID is always there: the attachment may be anyone's,
	// so nothing of that id is judged dead while the file is there.
	identity.Key
	Err error
}

func (d Damaged) Error() string { return fmt.Sprintf("registry file %s: %v", d.Path, d.Err) }

// Covers reports whether the damaged file stands where k's record would
// be: k's own file, or a directory on its path.
func (d Damaged) Covers(k identity.Key) bool {
	return d.ID == k.ID && (d.Key.Network == "" || d.Key.Network == k.Network) && (d.Key.IfName == "" || d.Key.IfName == k.IfName)
}
