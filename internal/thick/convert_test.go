package thick

import (
	"encoding/json"
	"strings"
	"testing"
)

const result100 = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/run/netns/w"}],` +
	`"ips":[{"address":"198.18.0.5/24","gateway":"198.18.0.1","interface":0}],"dns":{"nameservers":["198.18.0.1"]}}`

func TestConvertResult(t *testing.T) {
	for _, to := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run("a 1.0.0 result is printed as "+to, func(t *testing.T) {
			res, err := ConvertResult([]byte(result100), to)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := res.PrintTo(&out); err != nil {
				t.Fatal(err)
			}
			var got struct {
				CNIVersion string `json:"cniVersion"`
				IPs        []struct {
					Address string `json:"address"`
					Version string `json:"version"`
				} `json:"ips"`
				DNS struct{ Nameservers []string } `json:"dns"`
			}
			if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
				t.Fatal(err)
			}
			if got.CNIVersion != to || len(got.IPs) != 1 || got.IPs[0].Address != "198.18.0.5/24" || len(got.DNS.Nameservers) != 1 {
				t.Fatalf("got %s", out.String())
			}
			if legacy := to < "0.4.1"; legacy != (got.IPs[0].Version == "4") {
				t.Errorf("ips[0].version %q for %s: 0.x results name the IP version, 1.x do not", got.IPs[0].Version, to)
			}
		})
	}
	bad := []struct{ name, body, to string }{
		{"a result that is not JSON is refused", `not json`, "1.0.0"},
		{"a result without a version is refused", `{"ips":[]}`, "1.0.0"},
		{"an unknown target version is refused", result100, "9.9.9"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ConvertResult([]byte(tc.body), tc.to); err == nil {
				t.Fatal("converted, want an error")
			}
		})
	}
}
