package thick

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/seed1280861d/cninet/internal/buildinfo"
)

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
