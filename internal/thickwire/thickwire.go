package thickwire

import (
	"errors"
	"strconv"
	"time"
)

// The CNI commands the shim forwards.
const (
	CmdAdd    = "ADD"
	CmdDel    = "DEL"
	CmdCheck  = "CHECK"
	CmdStatus = "STATUS"
	CmdGC     = "GC"
)

// DefaultSocket is where the daemon listens and the shim connects when
// the shim's config names no "socket".
const DefaultSocket = "/run/cninet/cninet.sock"

// RequestPath is the HTTP path the shim posts requests to.
const RequestPath = "/cni"

// MaxRequestBytes bounds a request body: a runtime's config with a
// prevResult and thousands of valid attachments fits many times over.
const MaxRequestBytes = 1 << 20

// ProtocolVersion is the newest thick-mode protocol this build speaks
// (the daemon serves OldestProtocol to it; the shim sends each command
// in ProtocolFor's): the request's shape and meaning, and the answers
// (an acknowledgement, then the final answer). It goes up only when
// shim and daemon of different builds could misunderstand each other;
// cninet's release version does not matter.
//   - 1 added the number itself, ackBy, deadline and the acknowledgement.
//   - 2 sends the request's head (protocol, command, ackBy, deadline,
//     shim version) as HTTP headers too, so that the daemon reads a body
//     only once a slot is free.
//   - 3: the daemon answers an ADD with the result in the CNI version of
//     the shim's config, ready to print (the shim no longer converts it).
const ProtocolVersion = 3

// OldestProtocol is the oldest protocol the daemon still serves.
const OldestProtocol = 1

// ProtocolFor is the protocol the shim sends command in: the oldest that
// has what the command needs. Only ADD needs 3 (its result in the
// config's CNI version); DEL, CHECK, STATUS and GC mean the same in 2.
// So a daemon still running the protocol-2 build after an upgrade (not
// yet restarted) serves them, above all the runtime's DELs, and refuses
// only ADD (code 104).
func ProtocolFor(command string) int {
	if command == CmdAdd {
		return 3
	}
	return 2
}

// StatusAcknowledged is the informational (1xx) HTTP status the daemon
// sends as soon as it has accepted a request's head, before it waits for
// a slot: the shim then knows the daemon is alive, and waits for the
// final answer until its deadline instead of giving up on silence.
const StatusAcknowledged = 102 // 102 Processing

// The HTTP headers that carry a request's head (protocol 2 and later):
// what the daemon needs to acknowledge a request and queue it for a
// slot. The body repeats them.
const (
	HeaderProtocol    = "Cninet-Protocol"
	HeaderCommand     = "Cninet-Command"
	HeaderAckBy       = "Cninet-Ack-By"
	HeaderDeadline    = "Cninet-Deadline"
	HeaderShimVersion = "Cninet-Shim-Version"
)

// How long the shim waits for the daemon, so that a daemon that is
// stopped (SIGSTOP), deadlocked or swamped never hangs a runtime.
const (
	// SilenceLimit is how long the shim waits for the daemon's first
	// response headers (its acknowledgement or a final answer), counted
	// from the start of its request, the dial and the sending of the
	// request included. A daemon silent that long is treated like one
	// that cannot be reached: a DEL runs without it, the other commands
	// fail.
	SilenceLimit = 5 * time.Second
	// AnswerGrace is how long past the request's deadline the shim still
	// waits for the final answer, so that the daemon's own answer ("the
	// deadline passed", code 11, saying where) arrives before the shim
	// gives up with its own.
	AnswerGrace = 2 * time.Second
	// DefaultTimeout is the daemon's deadline for a request (its
	// --timeout), and the shim's for ADD, DEL and GC without a "timeout",
	// so that a burst queued in the daemon is served, not abandoned.
	DefaultTimeout = 2 * time.Minute
	// DefaultProbeTimeout is the shim's deadline for CHECK and STATUS
	// without a "timeout": runtimes ask these periodically (STATUS before
	// every pod start in containerd), and a runtime should hear "not now"
	// well before the next round instead of queueing rounds.
	DefaultProbeTimeout = 30 * time.Second
)

// Limits are how long the shim waits for the daemon in one request.
type Limits struct {
	// Silence: for the first response headers (SilenceLimit, or Timeout
	// when shorter).
	Silence time.Duration
	// Timeout: for the final answer, sent as the request's deadline.
	Timeout time.Duration
}

// ShimLimits are the shim's limits for command under its config's
// "timeout" (a Go duration, e.g. "30s", more than zero) for every
// command, else DefaultTimeout (ADD, DEL, GC) or DefaultProbeTimeout
// (CHECK, STATUS); "" is none. A "timeout" that is no positive duration
// is an error naming the key and the value.
func ShimLimits(command, timeout string) (Limits, error) {
	d := DefaultTimeout
	if command == CmdCheck || command == CmdStatus {
		d = DefaultProbeTimeout
	}
	if timeout != "" {
		var err error
		if d, err = time.ParseDuration(timeout); err != nil || d <= 0 {
			return Limits{}, errors.New(`cninet-shim config key "timeout" is ` + strconv.Quote(timeout) + `, want a positive Go duration such as "30s" or "2m"`)
		}
	}
	return Limits{Silence: min(SilenceLimit, d), Timeout: d}, nil
}

// CNIVersions are the CNI versions a shim config may name: the shim
// answers VERSION with them, and the daemon serves nothing else. The
// last is the newest, which the shim's VERSION answer names as its own.
var CNIVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// The error codes the daemon answers with besides the CNI spec's own
// (a delegate plugin's code always passes through unchanged).
const (
	CodeAlreadyAttached uint = 100 // ADD of an attachment that exists
	CodeCheckFailed     uint = 101 // CHECK found the attachment unhealthy
	CodeCleanupFailed   uint = 102 // DEL or GC could not remove everything
	CodeSetupFailed     uint = 103 // ADD failed without a plugin's error code
	CodeIncompatible    uint = 104 // the shim speaks a protocol the daemon does not
	// CodeRecordUnreadable: the host registry's record of the attachment
	// cannot be read (damaged, or a newer cninet's): it is kept, and
	// nothing ran.
	CodeRecordUnreadable uint = 105
)

// OwnerNameMax is the longest owner name, in bytes.
const OwnerNameMax = 64

// IsOwnerName says whether s may name an owner: a name, as executables
// have: 1-64 ASCII letters, digits, '.', '_', '+' or '-', the first a
// letter or a digit. A loop, not a regexp: every process linking this
// package (each cninet-shim start among them) would compile one at init.
func IsOwnerName(s string) bool {
	if len(s) == 0 || len(s) > OwnerNameMax || !isASCIIAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isASCIIAlnum(c) && c != '.' && c != '_' && c != '+' && c != '-' {
			return false
		}
	}
	return true
}

// IsCNIName says whether s is a CNI container id or network name:
// ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$, as libcni checks them.
func IsCNIName(s string) bool {
	if len(s) == 0 || !isASCIIAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isASCIIAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func isASCIIAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// ShimDelCommand is the hidden `cninet` subcommand that runs a DEL the
// daemon gave no answer to, for the shim: `cninet shim-del --socket S
// --timeout D --why W` with the request the daemon did not answer on its
// stdin. It runs the daemon's DEL under the host registry's locks with
// the daemon's info file, within D (the shim config's "timeout"), prints
// nothing and exits 0 when it succeeds, and prints the runtime's CNI
// error and exits 1 when it fails.
const ShimDelCommand = "shim-del"

// ShimTimesEnv names the environment variable that, when it holds an
// absolute file name, makes the shim append one line of timestamps per
// command to that file (for the benchmarks' breakdown of the hand-off;
// see ShimTimes).
const ShimTimesEnv = "CNINET_SHIM_TIMES"
