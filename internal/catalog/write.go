package catalog

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/seed1280861d/cninet/internal/errs"
)

// WriteConfList validates conflist and writes it atomically to
// dir/<name>.conflist (cninet.WriteConfList).
func WriteConfList(dir string, conflist []byte) (path string, err error) {
	list, err := parseConfList(conflist)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errs.InvalidConfig, err)
	}
	path = filepath.Join(dir, list.Name+".conflist")
	if err := writeAtomically(dir, path, conflist); err != nil {
		return "", fmt.Errorf("%w: writing conflist %s: %w", errs.IO, path, err)
	}
	return path, nil
}

func writeAtomically(dir, path string, data []byte) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	syncDir(dir)
	return nil
}

// syncDir makes the rename durable; failure only weakens crash safety, so
// it is not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
