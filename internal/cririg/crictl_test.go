package cririg

import (
	"encoding/json"
	"reflect"
	"testing"
)

// `crictl info` of containerd 1.6: the runtime's conditions, and under
// "cniconfig" go-cni's loaded networks (its loopback first, then the
// conflist). The rigs read NetworkReady and the loaded plugin types.
func TestInfoReadsConditionsAndTheLoadedPluginTypes(t *testing.T) {
	const out = `{
  "status": {"conditions": [
    {"type": "RuntimeReady", "status": true, "reason": "", "message": ""},
    {"type": "NetworkReady", "status": true, "reason": "", "message": ""}]},
  "cniconfig": {"PluginDirs": ["/opt/cni/bin"], "PluginConfDir": "/etc/cni/net.d", "PluginMaxConfNum": 1, "Prefix": "eth",
    "Networks": [
      {"Config": {"Name": "cni-loopback", "CNIVersion": "0.3.1", "Plugins": [{"Network": {"type": "loopback", "ipam": {}, "dns": {}}, "Source": "{\"type\":\"loopback\"}"}], "Source": ""}, "IFName": "lo"},
      {"Config": {"Name": "web", "CNIVersion": "1.0.0", "Plugins": [
        {"Network": {"type": "bridge", "ipam": {"type": "host-local"}, "dns": {}}, "Source": ""},
        {"Network": {"type": "portmap", "capabilities": {"portMappings": true}, "ipam": {}, "dns": {}}, "Source": ""}], "Source": ""}, "IFName": "eth0"}]},
  "config": {"containerd": {"snapshotter": "native"}}
}`
	var info Info
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatal(err)
	}
	if got, want := info.PluginTypes(), []string{"loopback", "bridge+portmap"}; !reflect.DeepEqual(got, want) {
		t.Errorf("PluginTypes() = %q, want %q", got, want)
	}
	ready := false
	for _, c := range info.Status.Conditions {
		ready = ready || c.Type == "NetworkReady" && c.Status
	}
	if !ready {
		t.Errorf("NetworkReady was not read as true: %+v", info.Status.Conditions)
	}
}
