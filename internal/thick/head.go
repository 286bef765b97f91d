package thick

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The HTTP headers that carry a request's head (protocol 2 and later):
// what the daemon needs to acknowledge a request and queue it for a
// slot. The body repeats them; the daemon reads it only once a slot is
// free, so a queue of waiting requests holds no bodies (each up to
// MaxRequestBytes) in the daemon's memory.
const (
	HeaderProtocol    = thickwire.HeaderProtocol
	HeaderCommand     = thickwire.HeaderCommand
	HeaderAckBy       = thickwire.HeaderAckBy
	HeaderDeadline    = thickwire.HeaderDeadline
	HeaderShimVersion = thickwire.HeaderShimVersion
)

// SetHead writes req's head into h: its protocol, command, shim version
// and, when set, AckBy and Deadline.
func (req *Request) SetHead(h http.Header) {
	h.Set(HeaderProtocol, strconv.Itoa(req.Protocol))
	h.Set(HeaderCommand, req.Command)
	if req.ShimVersion != "" {
		h.Set(HeaderShimVersion, req.ShimVersion)
	}
	if req.AckBy != nil {
		h.Set(HeaderAckBy, req.AckBy.Format(time.RFC3339Nano))
	}
	if req.Deadline != nil {
		h.Set(HeaderDeadline, req.Deadline.Format(time.RFC3339Nano))
	}
}

// RequestHead reads a request's head from h: a Request holding only
// Protocol, Command, ShimVersion, AckBy and Deadline. ok is false when h
// carries no head (a shim of protocol 1, whose body must be read first).
// A head that is there but unusable wraps ErrBadRequest and names the
// header and what was expected.
func RequestHead(h http.Header) (head *Request, ok bool, err error) {
	raw := h.Get(HeaderProtocol)
	if raw == "" {
		return nil, false, nil
	}
	protocol, err := strconv.Atoi(raw)
	if err != nil || protocol < 1 {
		return nil, true, fmt.Errorf("%w: header %s: %q, want a protocol number", ErrBadRequest, HeaderProtocol, raw)
	}
	head = &Request{Protocol: protocol, Command: h.Get(HeaderCommand), ShimVersion: h.Get(HeaderShimVersion)}
	if err := CheckProtocol(head, ""); err != nil {
		return head, true, nil // the caller refuses it, naming both protocols
	}
	switch head.Command {
	case CmdAdd, CmdDel, CmdCheck, CmdStatus, CmdGC:
	default:
		return nil, true, fmt.Errorf("%w: header %s: %q, want ADD, DEL, CHECK, STATUS or GC", ErrBadRequest, HeaderCommand, head.Command)
	}
	if head.AckBy, err = headerTime(h, HeaderAckBy); err != nil {
		return nil, true, err
	}
	if head.Deadline, err = headerTime(h, HeaderDeadline); err != nil {
		return nil, true, err
	}
	return head, true, nil
}

// headerTime is the RFC 3339 time of header name, nil when absent.
func headerTime(h http.Header, name string) (*time.Time, error) {
	raw := h.Get(name)
	if raw == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: header %s: %q, want an RFC 3339 time", ErrBadRequest, name, raw)
	}
	return &t, nil
}

// errHeadMismatch: a body that says otherwise than its request's head.
var errHeadMismatch = errors.New("the body does not match the request's head")

// matchHead checks that body says what head said: the daemon queued the
// request by its head's command and limits.
func matchHead(body, head *Request) error {
	same := func(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }
	if body.Protocol != head.Protocol || body.Command != head.Command || !same(body.AckBy, head.AckBy) || !same(body.Deadline, head.Deadline) {
		return fmt.Errorf("%w: %w: head: protocol %d %s, body: protocol %d %s; want the same protocol, command, ackBy and deadline in both",
			ErrBadRequest, errHeadMismatch, head.Protocol, head.Command, body.Protocol, body.Command)
	}
	return nil
}
