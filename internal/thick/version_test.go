package thick

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/buildinfo"
)

func TestPluginInfoKeepsTheStandardFieldsAndAddsCninetVersion(t *testing.T) {
	supported := []string{"0.3.1", "1.0.0", "1.1.0"}
	info := PluginInfo(supported...)
	if got := info.SupportedVersions(); !slices.Equal(got, supported) {
		t.Errorf("SupportedVersions() = %v, want %v", got, supported)
	}
	var out bytes.Buffer
	if err := info.Encode(&out); err != nil {
		t.Fatal(err)
	}

	// A runtime decodes it as libcni does.
	decoded, err := (&version.PluginDecoder{}).Decode(out.Bytes())
	if err != nil {
		t.Fatalf("libcni cannot decode %s: %v", out.Bytes(), err)
	}
	if got := decoded.SupportedVersions(); !slices.Equal(got, supported) {
		t.Errorf("decoded supportedVersions = %v, want %v", got, supported)
	}

	var fields map[string]any
	if err := json.Unmarshal(out.Bytes(), &fields); err != nil {
		t.Fatal(err)
	}
	if fields["cniVersion"] != version.Current() {
		t.Errorf("cniVersion = %v, want %s", fields["cniVersion"], version.Current())
	}
	if got, want := fields["cninetVersion"], buildinfo.Version(); got != want {
		t.Errorf("cninetVersion = %v, want %q (answer %s)", got, want, out.Bytes())
	}
	if len(fields) != 3 {
		t.Errorf("answer has fields %v, want cniVersion, supportedVersions, cninetVersion", fields)
	}
}

func TestHealthzSaysOkAndTheVersion(t *testing.T) {
	rec := httptest.NewRecorder()
	Healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("status %d, want 200", rec.Code)
	}
	if got, want := rec.Body.String(), "ok "+buildinfo.Version()+"\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}
