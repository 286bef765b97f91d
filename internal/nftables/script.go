package nftables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// RunScript implements NFTScriptRunner: `nft -f -` reads script from its
// stdin and commits it as one transaction. The command is bounded by
// ctx: one that has ended starts nothing, and nft still running when it
// ends is killed (and waited for a second at most). A failure carries
// what nft said.
func (h *hostNFTables) RunScript(ctx context.Context, script string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("nft -f -: not run: %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.bin, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("nft -f -: stopped: %w (%v): %s", ctx.Err(), err, strings.TrimSpace(stderr.String()))
	}
	return fmt.Errorf("nft -f -: %w: %s", err, strings.TrimSpace(stderr.String()))
}
