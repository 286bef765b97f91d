// Command killparent is a CNI plugin for crash tests: chained right
// before plugin P, its DEL runs right after P's (a DEL runs the chain
// backwards), and there it kills the process that ran the chain with
// SIGKILL, as an OOM kill or an agent restart would. It does so once, on
// the DEL of the container id its config names as "containerID", and
// remembers it did in the directory its config names as "stateDir";
// every other call passes the previous result through unchanged.
package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

type config struct {
	types.NetConf
	StateDir    string `json:"stateDir"`
	ContainerID string `json:"containerID"`
}

func parse(stdin []byte) (*config, error) {
	conf := &config{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "killparent: parsing config", err.Error())
	}
	if conf.StateDir == "" || conf.ContainerID == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, `killparent: "stateDir" and "containerID" are required`, "")
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
	if conf.PrevResult == nil {
		return types.PrintResult(&current.Result{CNIVersion: conf.CNIVersion}, conf.CNIVersion)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

func del(args *skel.CmdArgs) error {
	conf, err := parse(args.StdinData)
	if err != nil || args.ContainerID != conf.ContainerID {
		return err
	}
	if err := os.MkdirAll(conf.StateDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(conf.StateDir, "killed-"+args.ContainerID), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	switch {
	case errors.Is(err, fs.ErrExist):
		return nil // killed once already: the restarted runner's DEL goes through
	case err != nil:
		return err
	}
	f.Close()
	return syscall.Kill(os.Getppid(), syscall.SIGKILL)
}

func pass(*skel.CmdArgs) error { return nil }

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: del, Check: pass}, version.All, "killparent: kills the runner after the DEL of the plugin chained after it")
}
