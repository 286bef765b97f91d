package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// parseLive reads --live values: each is a comma-separated list of ids,
// every entry trimmed of white space; an empty entry or an id CNI would
// reject is an error (a typo in a live set would have gc collect the
// allocation it meant to keep).
func parseLive(values []string) ([]string, error) {
	var ids []string
	for _, v := range values {
		for _, entry := range strings.Split(v, ",") {
			id := strings.TrimSpace(entry)
			if id == "" {
				return nil, fmt.Errorf("empty id in %q", v)
			}
			if err := checkID(id); err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// readLiveFile reads the ids of a --live-file: one a line, trimmed; blank
// lines and lines starting with # are skipped.
func readLiveFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ids []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := checkID(line); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, n, err)
		}
		ids = append(ids, line)
	}
	return ids, sc.Err()
}

// checkID returns an error unless id is a valid CNI container id.
func checkID(id string) error {
	if !footprint.IsContainerID(id) {
		return fmt.Errorf("%q is not a valid container id (letters, digits, '_', '.', '-'; a letter or digit first)", id)
	}
	return nil
}
