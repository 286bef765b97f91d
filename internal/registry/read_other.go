//go:build !unix

package registry

import "os"

// readFile reads the file at path (buf, the unix read buffer, is unused).
func readFile(path string, _ []byte) ([]byte, error) { return os.ReadFile(path) }
