package thick

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
)

// DelForShim runs the DEL of a request the daemon of socket gave no
// answer to, for the shim (`cninet shim-del`, thickwire.ShimDelCommand):
// the request as the shim sent it, read from r and validated as the
// daemon validates it; the daemon's conf dir, plugins, cache and
// registry from its info file beside socket (ReadInfo: an untrusted one
// is refused, and then nothing runs; none at all is the defaults with
// the request's CNI_PATH); then Del under the host registry's locks,
// which serialise it with a daemon that wakes up and runs the same DEL.
// tweaks change the Config (tests inject fakes).
func DelForShim(ctx context.Context, socket string, r io.Reader, tweaks ...func(*cninet.Config)) error {
	req, conf, err := DecodeRequest(r)
	if err != nil {
		return err
	}
	if req.Command != CmdDel {
		return fmt.Errorf("%w: command %q, want DEL: only a DEL runs without the daemon", ErrBadRequest, req.Command)
	}
	info, _, err := ReadInfo(socket, filepath.SplitList(req.Path))
	if err != nil {
		return err
	}
	c, err := ConfiguratorForDel(info, req, conf, hclog.NewNullLogger(), nil, tweaks...)
	if err != nil {
		return err
	}
	defer c.Close()
	return Del(ctx, c, req, conf)
}
