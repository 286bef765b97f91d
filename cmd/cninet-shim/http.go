package main

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The few bytes of HTTP/1.1 the shim and the daemon exchange, written
// and read here (package net/http would be paid for at each of the
// shim's starts): one POST with a Content-Length and Connection: close,
// then informational answers (the acknowledgement) and one final answer
// with a Content-Length, a chunked body, or a body until the connection
// closes.

// postHead is the head of the POST of a request of body bytes in
// protocol, with the request's head as HTTP headers (thickwire.Header*).
func postHead(bodyLen, protocol int, command, shimVersion string, ackBy, deadline time.Time) []byte {
	b := make([]byte, 0, 512)
	b = append(b, "POST "+thickwire.RequestPath+" HTTP/1.1\r\nHost: cninet\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(bodyLen), 10)
	b = append(b, "\r\n"+thickwire.HeaderProtocol+": "...)
	b = strconv.AppendInt(b, int64(protocol), 10)
	b = append(b, "\r\n"+thickwire.HeaderCommand+": "+command+"\r\n"...)
	if shimVersion != "" && !strings.ContainsAny(shimVersion, "\r\n") {
		b = append(b, thickwire.HeaderShimVersion+": "+shimVersion+"\r\n"...)
	}
	b = appendTime(append(b, thickwire.HeaderAckBy+": "...), ackBy)
	b = appendTime(append(b, "\r\n"+thickwire.HeaderDeadline+": "...), deadline)
	return append(b, "\r\n\r\n"...)
}

// appendTime appends t as the daemon reads it: RFC 3339 with
// nanoseconds, in UTC (the local zone would load the zone database).
func appendTime(b []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(b, time.RFC3339Nano)
}

// answerHead is an answer's status line and the headers the shim reads.
type answerHead struct {
	code int
	// status is the code and its reason, as the status line has them.
	status string
	// length is the Content-Length; -1 when none was given.
	length  int
	chunked bool
}

// maxHeadBytes bounds an answer's head; maxAnswerBytes its body.
const (
	maxHeadBytes   = 64 << 10
	maxAnswerBytes = 16 << 20
)

// malformedAnswer: what came back is not an HTTP/1.x answer (another
// server on the socket, or a broken one): what says what was wrong.
type malformedAnswer struct{ what string }

func (e *malformedAnswer) Error() string { return "not an HTTP/1.x answer: " + e.what }

// malformed is a malformedAnswer: what was wrong, then the bytes b that
// were, quoted and cut.
func malformed(what, b string) error {
	if len(b) > 64 {
		b = b[:64] + "…"
	}
	return &malformedAnswer{what: what + " " + strconv.Quote(b)}
}

// answerCutShort: the connection broke, or the time ran out, in the
// middle of an answer's head that is no acknowledgement (a final answer
// begun): the daemon answered, and its answer was lost.
type answerCutShort struct{ err error }

func (e *answerCutShort) Error() string { return "an answer's head cut short: " + e.err.Error() }

func (e *answerCutShort) Unwrap() error { return e.err }

// answerReader reads answers from a connection, waiting for each read
// until by.
type answerReader struct {
	c   *stream
	by  time.Time
	buf []byte // read and not yet taken
}

// more reads what comes next onto buf.
func (r *answerReader) more() error {
	if cap(r.buf)-len(r.buf) < 4096 {
		r.buf = append(make([]byte, 0, 2*cap(r.buf)+4096), r.buf...)
	}
	n, err := r.c.read(r.buf[len(r.buf):cap(r.buf)], r.by)
	r.buf = r.buf[:len(r.buf)+n]
	return err
}

// line takes the next line, without its CRLF (or LF).
func (r *answerReader) line() (string, error) {
	for {
		for i, c := range r.buf {
			if c == '\n' {
				l := string(r.buf[:i])
				r.buf = r.buf[i+1:]
				return strings.TrimSuffix(l, "\r"), nil
			}
		}
		if len(r.buf) > maxHeadBytes {
			return "", &malformedAnswer{what: "a line of more than " + strconv.Itoa(maxHeadBytes) + " bytes"}
		}
		if err := r.more(); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
}

// head reads an answer's status line and headers. A head cut short is
// an answerCutShort unless what came of it may be an acknowledgement (a
// 1xx status line): an acknowledgement is no answer.
func (r *answerReader) head() (answerHead, error) {
	status, err := r.line()
	if err != nil {
		if len(r.buf) == 0 {
			return answerHead{}, err
		}
		switch isHTTP, informational := statusLinePrefix(r.buf); {
		case !isHTTP:
			return answerHead{}, malformed("it begins", string(r.buf))
		case !informational:
			return answerHead{}, &answerCutShort{err: err}
		}
		return answerHead{}, err
	}
	proto, rest, _ := strings.Cut(status, " ")
	code, err := strconv.Atoi(rest[:min(3, len(rest))])
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || code < 100 || code > 999 {
		return answerHead{}, malformed("status line", status)
	}
	h := answerHead{code: code, status: rest, length: -1}
	for size := len(status); ; {
		l, err := r.line()
		if err != nil {
			if code >= 200 {
				err = &answerCutShort{err: err}
			}
			return answerHead{}, err
		}
		if l == "" {
			return h, nil
		}
		if size += len(l); size > maxHeadBytes {
			return answerHead{}, &malformedAnswer{what: "a head of more than " + strconv.Itoa(maxHeadBytes) + " bytes"}
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return answerHead{}, malformed("a header line without a colon:", l)
		}
		value = strings.TrimSpace(value)
		switch {
		case strings.EqualFold(name, "Content-Length"):
			if h.length, err = strconv.Atoi(value); err != nil || h.length < 0 {
				return answerHead{}, malformed("a Content-Length that is no length:", l)
			}
		case strings.EqualFold(name, "Transfer-Encoding"):
			h.chunked = strings.EqualFold(value, "chunked")
		}
	}
}

// statusLinePrefix says whether b, the start of a status line, may be
// that of an HTTP/1.x answer (isHTTP) and of an informational (1xx)
// one: both, until b says otherwise.
func statusLinePrefix(b []byte) (isHTTP, informational bool) {
	const pattern = "HTTP/1.# 1" // '#': a digit
	for i := 0; i < len(b) && i < len(pattern); i++ {
		c, want := b[i], pattern[i]
		if want == '#' && '0' <= c && c <= '9' || c == want {
			continue
		}
		return i == len(pattern)-1 && '0' <= c && c <= '9', false // another code: HTTP, not 1xx
	}
	return true, true
}

// take takes n bytes.
func (r *answerReader) take(n int) ([]byte, error) {
	for len(r.buf) < n {
		if err := r.more(); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	out := r.buf[:n:n]
	r.buf = r.buf[n:]
	return out, nil
}

// body reads the body of an answer with head h.
func (r *answerReader) body(h answerHead) ([]byte, error) {
	switch {
	case h.code == 204 || h.code == 304:
		return nil, nil
	case h.chunked:
		return r.chunked()
	case h.length > maxAnswerBytes:
		return nil, errors.New("answer of " + strconv.Itoa(h.length) + " bytes, more than the shim reads")
	case h.length >= 0:
		return r.take(h.length)
	}
	for { // until the daemon closes the connection
		if len(r.buf) > maxAnswerBytes {
			return nil, errors.New("answer of more than " + strconv.Itoa(maxAnswerBytes) + " bytes")
		}
		if err := r.more(); err == io.EOF {
			return r.buf, nil
		} else if err != nil {
			return nil, err
		}
	}
}

// chunked reads a chunked body and its trailer.
func (r *answerReader) chunked() ([]byte, error) {
	var out []byte
	for {
		l, err := r.line()
		if err != nil {
			return nil, err
		}
		size, _, _ := strings.Cut(l, ";")
		n, err := strconv.ParseUint(strings.TrimSpace(size), 16, 32)
		switch {
		case err != nil:
			return nil, malformed("a chunk size that is no hexadecimal number:", l)
		case len(out)+int(n) > maxAnswerBytes:
			return nil, errors.New("answer of more than " + strconv.Itoa(maxAnswerBytes) + " bytes")
		}
		if n == 0 {
			for {
				if l, err := r.line(); err != nil || l == "" {
					return out, err
				}
			}
		}
		chunk, err := r.take(int(n) + 2)
		if err != nil {
			return nil, err
		}
		if string(chunk[n:]) != "\r\n" { // as net/http wants it
			return nil, malformed("a chunk of "+strconv.FormatUint(n, 10)+" bytes not followed by CRLF but by", string(chunk[n:]))
		}
		out = append(out, chunk[:n]...)
	}
}
