package thick

import (
	"fmt"
	"net/http"

	"github.com/seed1280861d/cninet/internal/buildinfo"
)

// Healthz answers the daemon's /healthz: "ok" and cninet's version.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "ok", buildinfo.Version())
}
