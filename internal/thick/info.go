package thick

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Info is what the daemon writes beside its socket (InfoPath) so that a
// shim whose daemon is down can run the DEL itself with the same
// networks, plugins and cache.
type Info struct {
	ConfDir  string   `json:"confDir"`
	CNIPath  []string `json:"cniPath"`
	CacheDir string   `json:"cacheDir"`
	// StateDir is the host registry the daemon and the DEL cninet runs for the shim
	// share with every other process on the host; "": DefaultStateDir.
	StateDir string `json:"stateDir,omitempty"`
}

// Defaults for a daemon started without the flags, and for a shim that
// finds no Info.
const (
	DefaultConfDir  = "/etc/cninet/net.d"
	DefaultCacheDir = "/var/lib/cninet/cache"
	DefaultStateDir = "/var/lib/cninet"
	// Owner owns the attachments thick mode makes, in the daemon and in
	// the DEL cninet runs for the shim alike: the registry keeps them apart from the
	// attachments of orchestrators that embed cninet on the same host.
	Owner = "cninet-daemon"
)

// InfoPath is where the daemon of socket writes its Info.
func InfoPath(socket string) string { return socket + ".json" }

// WriteInfo writes info beside socket, atomically (a shim may read it at
// any moment) and readable by root only.
func WriteInfo(socket string, info Info) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	path := InfoPath(socket)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".info-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// ReadInfo reads the Info of socket's daemon, trusting it only as
// readTrustedFile does: the plugins it names run as root. Without one
// (the daemon never ran, or its directory is missing), it returns the
// defaults with cniPath as the plugin path (the runtime's CNI_PATH) and
// found false. An Info (or its directory) that another user could have
// written is an error wrapping ErrUntrustedPath, naming the path, its
// owner or mode: nothing of it is used, not even the defaults, since the
// daemon's real directories are then unknown.
func ReadInfo(socket string, cniPath []string) (info Info, found bool, err error) {
	path := InfoPath(socket)
	b, err := readTrustedFile(path, "daemon's info file", MaxRequestBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return Info{ConfDir: DefaultConfDir, CNIPath: cniPath, CacheDir: DefaultCacheDir, StateDir: DefaultStateDir}, false, nil
	}
	if err != nil {
		return Info{}, false, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return Info{}, false, fmt.Errorf("%s: %w", path, err)
	}
	if info.ConfDir == "" || info.CacheDir == "" || len(info.CNIPath) == 0 {
		return Info{}, false, fmt.Errorf("%s: want confDir, cniPath and cacheDir, got %s", path, b)
	}
	if info.StateDir == "" {
		info.StateDir = DefaultStateDir
	}
	return info, true, nil
}
