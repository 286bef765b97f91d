// Command failonce is a CNI plugin for tests, chained after real plugins:
// the first ADD of each container id fails with "try again later" (CNI
// error 11), later ones pass the previous result through. It remembers ids
// in the directory named by "stateDir" in its config. DEL and CHECK pass.
package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

type config struct {
	types.NetConf
	StateDir string `json:"stateDir"`
}

func parse(stdin []byte) (*config, error) {
	conf := &config{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, err
	}
	if conf.StateDir == "" {
		return nil, errors.New(`failonce: "stateDir" is required`)
	}
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return nil, err
	}
	return conf, nil
}

func add(args *skel.CmdArgs) error {
	conf, err := parse(args.StdinData)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(conf.StateDir, 0o755); err != nil {
		return err
	}
	mark := filepath.Join(conf.StateDir, args.ContainerID)
	if _, err := os.Stat(mark); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(mark, nil, 0o644); err != nil {
			return err
		}
		return types.NewError(types.ErrTryAgainLater, "failonce: simulated transient failure", args.ContainerID)
	}
	if conf.PrevResult == nil {
		return types.PrintResult(&current.Result{CNIVersion: conf.CNIVersion}, conf.CNIVersion)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

func pass(*skel.CmdArgs) error { return nil }

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: pass, Check: pass}, version.All, "failonce: fails the first ADD of each container")
}
