package thick

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/buildinfo"
)

// PluginInfo is the shim's answer to CNI VERSION: libcni's answer for
// the CNI versions supported ("cniVersion", "supportedVersions"), with
// cninet's own version added as "cninetVersion". The CNI spec lets a
// plugin add fields to it; runtimes read the standard ones only.
func PluginInfo(supported ...string) version.PluginInfo {
	return pluginInfo{PluginInfo: version.PluginSupports(supported...), cninet: buildinfo.Version()}
}

type pluginInfo struct {
	version.PluginInfo
	cninet string
}

// Encode writes the standard answer as libcni encodes it, plus
// "cninetVersion".
func (p pluginInfo) Encode(w io.Writer) error {
	var std bytes.Buffer
	if err := p.PluginInfo.Encode(&std); err != nil {
		return err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(std.Bytes(), &fields); err != nil {
		return fmt.Errorf("libcni's VERSION answer: %w", err)
	}
	v, err := json.Marshal(p.cninet)
	if err != nil {
		return err
	}
	fields["cninetVersion"] = v
	return json.NewEncoder(w).Encode(fields)
}

// Healthz answers the daemon's /healthz: "ok" and cninet's version.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "ok", buildinfo.Version())
}
