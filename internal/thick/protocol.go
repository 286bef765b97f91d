package thick

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The names the shim and the daemon share (package thickwire holds
// them, so that the shim links nothing of this package).
const (
	CmdAdd             = thickwire.CmdAdd
	CmdDel             = thickwire.CmdDel
	CmdCheck           = thickwire.CmdCheck
	CmdStatus          = thickwire.CmdStatus
	CmdGC              = thickwire.CmdGC
	MaxRequestBytes    = thickwire.MaxRequestBytes
	DefaultSocket      = thickwire.DefaultSocket
	RequestPath        = thickwire.RequestPath
	ProtocolVersion    = thickwire.ProtocolVersion
	OldestProtocol     = thickwire.OldestProtocol
	StatusAcknowledged = thickwire.StatusAcknowledged
)

// Request is one CNI invocation of the shim, as the runtime made it: the
// CNI_* environment and the config it wrote on stdin (with its
// runtimeConfig, prevResult and cni.dev/valid-attachments).
type Request struct {
	Command     string          `json:"command"`
	ContainerID string          `json:"containerID,omitempty"`
	NetNS       string          `json:"netns,omitempty"`
	IfName      string          `json:"ifName,omitempty"`
	Args        string          `json:"args,omitempty"`
	Path        string          `json:"path,omitempty"`
	Config      json.RawMessage `json:"config"`
	// Owner is whose attachments these are when the config names no
	// "owner": the shim sends the calling runtime's executable name.
	Owner string `json:"owner,omitempty"`

	// Protocol is the thick-mode protocol the shim speaks
	// (ProtocolVersion); the daemon refuses one it does not
	// (CheckProtocol). 0: a shim older than protocol numbers.
	Protocol int `json:"protocol,omitempty"`
	// ShimVersion is the shim's cninet release, for messages only.
	ShimVersion string `json:"shimVersion,omitempty"`
	// AckBy is when the shim stops waiting for the daemon to acknowledge
	// the request (StatusAcknowledged); a request the daemon reads later
	// is refused unrun: the shim has already given up on it (and run a
	// DEL itself). nil: no limit.
	AckBy *time.Time `json:"ackBy,omitempty"`
	// Deadline is when the shim stops waiting for the answer; the
	// daemon's deadline for the request is this one when it comes first.
	// nil: the daemon's own.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// ErrIncompatibleShim: the shim speaks a thick-mode protocol the daemon
// does not: the older of the two must be brought to the other's release.
var ErrIncompatibleShim = errors.New("incompatible cninet-shim")

// CheckProtocol refuses a request whose protocol this daemon does not
// speak, naming both sides' protocols and releases, and which side is
// older: a shim newer than the daemon most often means a daemon not
// restarted since cninet was upgraded.
func CheckProtocol(req *Request, daemonVersion string) error {
	if req.Protocol >= OldestProtocol && req.Protocol <= ProtocolVersion {
		return nil
	}
	shim := "a cninet-shim older than protocol numbers"
	if req.ShimVersion != "" || req.Protocol != 0 {
		shim = fmt.Sprintf("cninet-shim %s", req.ShimVersion)
	}
	if req.Protocol > ProtocolVersion {
		return fmt.Errorf("%w: %s speaks thick-mode protocol %d, newer than this daemon (cninet %s), which speaks %d to %d: the daemon is older than the shim; restart cninet daemon (systemctl restart cninet) if cninet was upgraded since it started, else install the cninet-shim of the daemon's release",
			ErrIncompatibleShim, shim, req.Protocol, daemonVersion, OldestProtocol, ProtocolVersion)
	}
	return fmt.Errorf("%w: %s speaks thick-mode protocol %d, older than this daemon (cninet %s), which speaks %d to %d: the shim is older than the daemon; install the cninet-shim of the daemon's release (make install)",
		ErrIncompatibleShim, shim, req.Protocol, daemonVersion, OldestProtocol, ProtocolVersion)
}

// OwnerOf is the owner a request acts for: the shim config's "owner",
// else the runtime the shim found, else Owner. Each runtime's GC then
// collects only its own attachments.
func OwnerOf(req *Request, conf *NetConf) string {
	switch {
	case conf.Owner != "":
		return conf.Owner
	case req.Owner != "":
		return req.Owner
	}
	return Owner
}

// CheckOwner says whether owner can name an owner ("" can: none).
func CheckOwner(owner string) error {
	if owner != "" && !thickwire.IsOwnerName(owner) {
		return fmt.Errorf("%w: owner %q, want 1-64 letters, digits, '.', '_', '+' or '-'", ErrBadRequest, owner)
	}
	return nil
}

// NetConf is what the daemon reads of the shim's config.
type NetConf struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	Type       string `json:"type"`
	Socket     string `json:"socket,omitempty"`
	Owner      string `json:"owner,omitempty"`
	// Timeout is how long the shim waits for the daemon's answer (a Go
	// duration); the daemon ignores it. See ShimLimits.
	Timeout       string         `json:"timeout,omitempty"`
	RuntimeConfig map[string]any `json:"runtimeConfig,omitempty"`
	// PrevResult is the runtime's result of the attachment's ADD, which
	// it sends with CHECK (and DEL): CHECK compares the attachment to it.
	PrevResult       json.RawMessage      `json:"prevResult,omitempty"`
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`
}

// ErrBadRequest: a request the daemon cannot serve as given (malformed,
// oversized, a field missing or unusable). Nothing on the host changed.
var ErrBadRequest = errors.New("bad thick-mode request")

// CNIVersions are the CNI versions a shim config may name: the shim
// answers VERSION with them, and the daemon serves nothing else.
var CNIVersions = thickwire.CNIVersions

// ErrIncompatibleCNIVersion: the config names a CNI version thick mode
// does not serve, or one that has no such command (CHECK came with 0.4.0,
// STATUS and GC with 1.1.0). The runtime sees CNI error code 1.
var ErrIncompatibleCNIVersion = errors.New("incompatible CNI version")

// CheckCNIVersion says whether a config of cniVersion can carry command:
// a version of CNIVersions that has the command. A failure wraps
// ErrBadRequest and ErrIncompatibleCNIVersion and names both.
func CheckCNIVersion(command, cniVersion string) error {
	if !slices.Contains(CNIVersions, cniVersion) {
		return fmt.Errorf("%w: %w: config cniVersion %q, want one of %s", ErrBadRequest, ErrIncompatibleCNIVersion,
			cniVersion, strings.Join(CNIVersions, ", "))
	}
	since := map[string]string{CmdCheck: "0.4.0", CmdStatus: "1.1.0", CmdGC: "1.1.0"}[command]
	if since == "" {
		return nil
	}
	if ok, err := version.GreaterThanOrEqualTo(cniVersion, since); err != nil || !ok {
		return fmt.Errorf("%w: %w: config cniVersion %q has no %s command, want %s or later", ErrBadRequest, ErrIncompatibleCNIVersion,
			cniVersion, command, since)
	}
	return nil
}

// DecodeRequest reads one request of at most MaxRequestBytes from r and
// validates it: a known command, a config with a CNI network name, and
// a cniVersion that has the command (CheckCNIVersion), and
// for ADD, DEL and CHECK a CNI container id, an interface name, and (ADD,
// CHECK) an absolute netns path. Every failure wraps ErrBadRequest and
// names the field and what was expected.
func DecodeRequest(r io.Reader) (*Request, *NetConf, error) {
	body, err := io.ReadAll(io.LimitReader(r, MaxRequestBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: reading the body: %w", ErrBadRequest, err)
	}
	if len(body) > MaxRequestBytes {
		return nil, nil, fmt.Errorf("%w: body exceeds %d bytes", ErrBadRequest, MaxRequestBytes)
	}
	var req Request
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, nil, fmt.Errorf("%w: %w: body is not a request object: %w", ErrBadRequest, errMalformed, err)
	}
	if dec.More() {
		return nil, nil, fmt.Errorf("%w: %w: body holds more than one JSON value", ErrBadRequest, errMalformed)
	}
	var conf NetConf
	if err := json.Unmarshal(req.Config, &conf); err != nil {
		return nil, nil, fmt.Errorf("%w: %w: config is not a CNI network config object: %w", ErrBadRequest, errMalformed, err)
	}
	if err := validate(&req, &conf); err != nil {
		return nil, nil, err
	}
	return &req, &conf, nil
}

// validate checks what every command needs, then what its own needs.
func validate(req *Request, conf *NetConf) error {
	switch req.Command {
	case CmdAdd, CmdDel, CmdCheck, CmdStatus, CmdGC:
	default:
		return fmt.Errorf("%w: command %q, want ADD, DEL, CHECK, STATUS or GC", ErrBadRequest, req.Command)
	}
	if err := CheckCNIVersion(req.Command, conf.CNIVersion); err != nil {
		return err
	}
	if err := checkName(conf.Name); err != nil {
		return err
	}
	if err := errors.Join(CheckOwner(conf.Owner), CheckOwner(req.Owner)); err != nil {
		return err
	}
	if req.Command == CmdStatus || req.Command == CmdGC {
		return validateGC(conf)
	}
	if err := cninet.CheckIfName(req.IfName); err != nil {
		return fmt.Errorf("%w: CNI_IFNAME: %w", ErrBadRequest, err)
	}
	if _, err := allocationID(req.ContainerID); err != nil {
		return err
	}
	if req.Command == CmdDel {
		return nil // the namespace may be gone: DEL must still clean up
	}
	if req.NetNS == "" || !filepath.IsAbs(req.NetNS) || filepath.Clean(req.NetNS) != req.NetNS {
		return fmt.Errorf("%w: CNI_NETNS %q, want the clean absolute path of a network namespace", ErrBadRequest, req.NetNS)
	}
	return nil
}

func validateGC(conf *NetConf) error {
	for i, a := range conf.ValidAttachments {
		if _, err := allocationID(a.ContainerID); err != nil {
			return fmt.Errorf("cni.dev/valid-attachments[%d]: %w", i, err)
		}
		if a.IfName == "" {
			continue // the container's every interface is live
		}
		if err := cninet.CheckIfName(a.IfName); err != nil {
			return fmt.Errorf("%w: cni.dev/valid-attachments[%d]: %w", ErrBadRequest, i, err)
		}
	}
	return nil
}

// checkName wants a CNI network name: no path separators or dots only,
// since it picks a conflist from the daemon's directory.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`+"\x00") {
		return fmt.Errorf("%w: network name %q, want a CNI network name (the delegate conflist's)", ErrBadRequest, name)
	}
	return nil
}

// allocationID checks a container id as cninet does.
func allocationID(id string) (string, error) {
	if !footprint.IsContainerID(id) {
		return "", fmt.Errorf("%w: CNI_CONTAINERID %q, want ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$", ErrBadRequest, id)
	}
	return id, nil
}
