// Command failonce is a CNI plugin for tests, chained after the real
// plugins, that makes an attachment fail the way a busy host does: the
// first ADD of each container id fails with CNI error 11 ("try again
// later"); every later ADD passes the previous result through unchanged.
// It remembers the ids it failed in the directory its config names as
// "stateDir". DEL and CHECK succeed.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
		return nil, types.NewError(types.ErrDecodingFailure, "failonce: parsing config", err.Error())
	}
	if conf.StateDir == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, `failonce: "stateDir" is required`, "")
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
	// O_EXCL makes "first" exact even if a runtime retries concurrently.
	// skel has already checked that the container id is safe as a name.
	f, err := os.OpenFile(filepath.Join(conf.StateDir, args.ContainerID), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	switch {
	case err == nil:
		f.Close()
		return types.NewError(types.ErrTryAgainLater, "failonce: simulated transient failure",
			fmt.Sprintf("first ADD of container %s", args.ContainerID))
	case !errors.Is(err, fs.ErrExist):
		return err
	}
	if conf.PrevResult == nil {
		// Chained first, or alone: nothing to pass on, but ADD must print a result.
		return types.PrintResult(&current.Result{CNIVersion: conf.CNIVersion}, conf.CNIVersion)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

func pass(*skel.CmdArgs) error { return nil }

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: pass, Check: pass}, version.All, "failonce: fails the first ADD of each container")
}
