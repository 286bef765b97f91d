//go:build !unix

package registry

import "fmt"

// tryLockFile: cninet runs on Linux; elsewhere the registry can be read
// and written (tests of the pure parts) but not locked.
func tryLockFile(path string, _, _ bool) (func(), error) {
	return nil, fmt.Errorf("lock %s: file locks need a unix system", path)
}
