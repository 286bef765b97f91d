package cninet

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// checkNetNS fails, wrapping ErrNoNetNS, when path is not a network
// namespace: it does not exist, or it is some other file (a regular
// file, another kind of namespace). No plugin could attach it, and
// retrying cannot make it one. The caller adds what that means for its
// operation (ErrInvalidArgument for Setup, ErrCheckFailed for Check).
func checkNetNS(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s does not exist (want the path of a network namespace, such as /run/netns/NAME or /proc/PID/ns/net)",
			ErrNoNetNS, path)
	}
	if err != nil {
		return fmt.Errorf("%w: opening %s: %w", ErrNoNetNS, path, err)
	}
	defer f.Close()
	kind, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil {
		return fmt.Errorf("%w: %s is not a namespace file (want a network namespace): %w", ErrNoNetNS, path, err)
	}
	if kind != unix.CLONE_NEWNET {
		return fmt.Errorf("%w: %s is a namespace of another kind (type %#x), want a network namespace", ErrNoNetNS, path, kind)
	}
	return nil
}
