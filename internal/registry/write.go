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

// disk is how the registry changes its state directory: each change of a
// directory entry and each sync is one call, so that a test can record
// their order and judge what a power loss at any point would keep
// (write_durability_test.go). osDisk is the real one.
type disk interface {
	mkdir(path string) error
	createTemp(dir, pattern string) (diskFile, error)
	rename(from, to string) error
	remove(path string) error
	syncDir(dir string) error
}

// diskFile is a file being written: its data is durable once Sync
// returned.
type diskFile interface {
	Name() string
	Write(p []byte) (int, error)
	Sync() error
	Close() error
}

// fsys is the disk the registry writes to.
var fsys disk = osDisk{}

type osDisk struct{}

func (osDisk) mkdir(path string) error { return os.Mkdir(path, 0o700) }
func (osDisk) createTemp(dir, pattern string) (diskFile, error) {
	return os.CreateTemp(dir, pattern)
}
func (osDisk) rename(from, to string) error { return os.Rename(from, to) }
func (osDisk) remove(path string) error     { return os.Remove(path) }

func (osDisk) syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// mkdirAllSynced creates root/elems… as needed (0700), fsyncing each new
// directory's parent so that the new entry survives a crash of the host;
// root itself and its ancestors too when missing. One mkdir when the
// directory is there already. It reports whether any directory was
// created.
func mkdirAllSynced(root string, elems ...string) (bool, error) {
	return mkdirSynced(filepath.Join(append([]string{root}, elems...)...))
}

// mkdirSynced creates dir (0700), and its missing ancestors first, each
// synced into its parent; a directory already there is left as it is.
func mkdirSynced(dir string) (bool, error) {
	err := fsys.mkdir(dir)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrExist):
		return false, nil
	case errors.Is(err, os.ErrNotExist) && filepath.Dir(dir) != dir:
		if _, err := mkdirSynced(filepath.Dir(dir)); err != nil {
			return false, err
		}
		if err := fsys.mkdir(dir); errors.Is(err, os.ErrExist) {
			return false, nil // another process made it meanwhile, and synced it
		} else if err != nil {
			return false, err
		}
	default:
		return false, err
	}
	if err := step("sync new dir"); err != nil {
		return true, err
	}
	return true, fsys.syncDir(filepath.Dir(dir))
}

// writeFileAtomic replaces path with data through a temporary file in
// tmpDir (on the same file system): a reader, or a process killed at any
// step, sees the old file or the whole new one, and once it returns the
// new one survives a crash of the host.
func writeFileAtomic(tmpDir, path string, data []byte) (err error) {
	f, err := fsys.createTemp(tmpDir, "record-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil && !errors.Is(err, errCrashed) {
			fsys.remove(tmp)
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
	if err := fsys.rename(tmp, path); err != nil {
		return err
	}
	if err := step("sync dir"); err != nil {
		return err
	}
	return fsys.syncDir(filepath.Dir(path))
}
