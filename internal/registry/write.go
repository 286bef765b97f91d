package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// crashAt, when a test sets it, is called at each step of a write or a
// removal and stops it there when it returns an error, as a process
// killed at that point would: nothing is cleaned up.
var crashAt func(step string) error

// errCrashed wraps what crashAt returns.
var errCrashed = errors.New("crashed")

func step(name string) error {
	if crashAt == nil {
		return nil
	}
	if err := crashAt(name); err != nil {
		return fmt.Errorf("%w at %s: %w", errCrashed, name, err)
	}
	return nil
}

// mkdirAllSynced creates root/elems… as needed (0700), fsyncing each new
// directory's parent so that the new entry survives a crash of the host.
// It reports whether any directory was created.
func mkdirAllSynced(root string, elems ...string) (bool, error) {
	dir, created := root, false
	for _, e := range elems {
		parent := dir
		dir = filepath.Join(dir, e)
		err := os.Mkdir(dir, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return created, err
		}
		created = true
		if err := step("sync new dir"); err != nil {
			return created, err
		}
		if err := syncDir(parent); err != nil {
			return created, err
		}
	}
	return created, nil
}

// writeFileAtomic replaces path with data through a temporary file in
// tmpDir (on the same file system): a reader, or a process killed at any
// step, sees the old file or the whole new one, and once it returns the
// new one survives a crash of the host.
func writeFileAtomic(tmpDir, path string, data []byte) (err error) {
	f, err := os.CreateTemp(tmpDir, "record-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil && !errors.Is(err, errCrashed) {
			os.Remove(tmp)
		}
	}()
	if err := step("write"); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := step("sync"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := step("rename"); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if err := step("sync dir"); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
