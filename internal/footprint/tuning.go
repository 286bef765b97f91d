package footprint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// The tuning plugin saves an interface's settings before it changes them,
// one file per attachment and interface:
//
//	<dataDir>/<ID>_<IF>.json   (dataDir defaults to /run/cni/tuning)
//
// Its DEL restores them inside the namespace and removes the file; with
// the namespace already gone it cannot, and the file stays. The file
// names the id and interface but no network: it is an attachment's when
// its network uses tuning with that directory and the interface is one of
// the network's.

type tuning struct{}

// tuningDirs returns the data directories of the network's tuning
// plugins.
func tuningDirs(n Network) []string {
	type dataDirConf struct {
		DataDir string `json:"dataDir"`
	}
	var dirs []string
	for _, conf := range configs[dataDirConf](n, "tuning") {
		dirs = appendOnce(dirs, orDefault(conf.DataDir, DefaultTuningDir))
	}
	return dirs
}

// DefaultTuningDir is where the tuning plugin keeps its files unless its
// configuration names another dataDir.
const DefaultTuningDir = "/run/cni/tuning"

// TuningFile is the tuning plugin's backup file of the attachment's
// interface ifName in dir.
func (a Attachment) TuningFile(dir, ifName string) string {
	return filepath.Join(dir, a.ID+"_"+ifName+".json")
}

func (tuning) prove(*view, attSet) []claim            { return nil }
func (tuning) holders(*view, attSet, addrSet) []claim { return nil }

func (tuning) plan(v *view, set attSet, _ *evidence, p *plan) {
	for _, a := range set.sorted() {
		n := v.nets[a.Network]
		for _, dir := range tuningDirs(n) {
			for _, ifName := range n.ifNames() {
				if path := a.TuningFile(dir, ifName); exists(path) {
					p.files = append(p.files, fileChange{kind: KindTuningFile, att: a, path: path})
				}
			}
		}
	}
}

func (tuning) discover(v *view, found attSet) {
	for _, n := range sortedNets(v.nets) {
		for _, dir := range tuningDirs(n) {
			entries, err := os.ReadDir(dir)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				v.errs.add(err)
			}
			for _, e := range entries {
				if id, ok := tuningFileID(e.Name(), n.ifNames()); ok {
					found[Attachment{n.Name, id}] = true
				}
			}
		}
	}
}

// tuningFileID returns the id of a backup file name <ID>_<IF>.json for one
// of ifNames.
func tuningFileID(name string, ifNames []string) (string, bool) {
	base, ok := strings.CutSuffix(name, ".json")
	if !ok {
		return "", false
	}
	for _, ifName := range ifNames {
		if id, ok := strings.CutSuffix(base, "_"+ifName); ok && IsContainerID(id) {
			return id, true
		}
	}
	return "", false
}
