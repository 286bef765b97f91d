package thick

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/version"
)

const result100 = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/run/netns/w"}],` +
	`"ips":[{"address":"198.18.0.5/24","gateway":"198.18.0.1","interface":0}],"dns":{"nameservers":["198.18.0.1"]}}`

func TestAnswerResultIsInTheConfigsVersion(t *testing.T) {
	res, err := version.NewResult("1.0.0", []byte(result100))
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range CNIVersions {
		t.Run("a 1.0.0 result is answered as "+to, func(t *testing.T) {
			out, err := answerResult(res, to)
			if err != nil {
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
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if got.CNIVersion != to || len(got.IPs) != 1 || got.IPs[0].Address != "198.18.0.5/24" || len(got.DNS.Nameservers) != 1 {
				t.Fatalf("got %s", out)
			}
			if legacy := to < "0.4.1"; legacy != (got.IPs[0].Version == "4") {
				t.Errorf("ips[0].version %q for %s: 0.x results name the IP version, 1.x do not", got.IPs[0].Version, to)
			}
		})
	}
	t.Run("an unknown version is refused as undecodable, naming both", func(t *testing.T) {
		_, err := answerResult(res, "9.9.9")
		if err == nil || ErrorFor(err).Code != 6 || !strings.Contains(err.Error(), "1.0.0") || !strings.Contains(err.Error(), "9.9.9") {
			t.Fatalf("got %v", err)
		}
	})
}
