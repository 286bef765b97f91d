package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet/internal/errs"
)

// confExtensions are the file kinds a conflist directory is read for, as
// libcni does.
var confExtensions = []string{".conf", ".conflist", ".json"}

// FindConfList returns the conflist of the network called name from dir
// (cninet.LoadConfList).
func FindConfList(dir, name string) ([]byte, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty network name", errs.InvalidConfig)
	}
	files, err := confFiles(dir)
	if err != nil {
		return nil, err
	}
	var found []string
	var skipped []error
	for _, file := range files {
		list, err := readConfFile(file)
		if err != nil {
			if fileMayBe(file, name) {
				return nil, fmt.Errorf("%w: network %q: %s: %w", errs.InvalidConfig, name, file, err)
			}
			skipped = append(skipped, fmt.Errorf("%s: %w", file, err))
			continue
		}
		if list.Name == name {
			return list.Bytes, nil
		}
		found = append(found, list.Name)
	}
	return nil, notFoundError(dir, name, found, skipped)
}

// confFiles lists the conflist files of dir, sorted.
func confFiles(dir string) ([]string, error) {
	if _, err := os.Stat(dir); err != nil { // libcni takes a missing directory for an empty one
		return nil, fmt.Errorf("%w: conflist directory: %w", errs.InvalidConfig, err)
	}
	files, err := libcni.ConfFiles(dir, confExtensions)
	if err != nil {
		return nil, fmt.Errorf("%w: reading conflist directory %s: %w", errs.InvalidConfig, dir, err)
	}
	sort.Strings(files)
	return files, nil
}

func notFoundError(dir, name string, found []string, skipped []error) error {
	listed := "none"
	if len(found) > 0 {
		listed = strings.Join(found, ", ")
	}
	err := fmt.Errorf("%w: no network %q in %s (found: %s)", errs.NetworkNotFound, name, dir, listed)
	return withSkipped(err, skipped)
}

// withSkipped adds to err the unreadable files skipped on the way: a
// network asked for may be in one.
func withSkipped(err error, skipped []error) error {
	if len(skipped) > 0 {
		err = fmt.Errorf("%w; %d unreadable file(s) skipped: %w", err, len(skipped), errors.Join(skipped...))
	}
	return err
}

// fileMayBe reports whether a file that failed to parse could be the named
// network's own: its base name is the network name, or its (broken) JSON
// still shows the name. Only then does a broken file fail the load; anything
// else is somebody else's problem and must not break every network.
func fileMayBe(file, name string) bool {
	if strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)) == name {
		return true
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	quoted, _ := json.Marshal(name)
	return regexp.MustCompile(`"name"\s*:\s*` + regexp.QuoteMeta(string(quoted))).Match(raw)
}

// readConfFile parses one file as a conflist, upconverting a single-plugin
// config. A .conf or .json file holding a conflist is accepted as one.
func readConfFile(file string) (*libcni.NetworkConfigList, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(file, ".conflist") || hasPluginsKey(raw) {
		return parseConfList(raw)
	}
	conf, err := libcni.NetworkPluginConfFromBytes(raw)
	if err != nil {
		return nil, err
	}
	if conf.Network.Type == "" {
		return nil, errors.New(`single-plugin config has no "type"`)
	}
	// A list of the one plugin, whose conf is the file as written (not
	// re-encoded from the parsed struct, which would add every field's
	// zero value).
	list, err := json.Marshal(map[string]any{
		"name":       conf.Network.Name,
		"cniVersion": conf.Network.CNIVersion,
		"plugins":    []json.RawMessage{conf.Bytes},
	})
	if err != nil {
		return nil, err
	}
	return parseConfList(list)
}

func hasPluginsKey(raw []byte) bool {
	var probe struct {
		Plugins json.RawMessage `json:"plugins"`
	}
	return json.Unmarshal(raw, &probe) == nil && probe.Plugins != nil
}
