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

// postHead is the head of the POST of a request of body bytes, with the
// request's head as HTTP headers (thickwire.Header*).
func postHead(bodyLen int, command, shimVersion string, ackBy, deadline time.Time) []byte {
	b := make([]byte, 0, 512)
	b = append(b, "POST "+thickwire.RequestPath+" HTTP/1.1\r\nHost: cninet\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(bodyLen), 10)
	b = append(b, "\r\n"+thickwire.HeaderProtocol+": "...)
	b = strconv.AppendInt(b, thickwire.ProtocolVersion, 10)
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

// errMalformedAnswer: what came back is not an HTTP/1.x answer.
var errMalformedAnswer = errors.New("malformed HTTP answer")

// answerReader reads answers from a connection, waiting for each read
// until by.
type answerReader struct {
	c   *unixConn
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
			return "", errMalformedAnswer
		}
		if err := r.more(); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
	}
}

// head reads an answer's status line and headers.
func (r *answerReader) head() (answerHead, error) {
	status, err := r.line()
	if err != nil {
		return answerHead{}, err
	}
	proto, rest, _ := strings.Cut(status, " ")
	code, err := strconv.Atoi(rest[:min(3, len(rest))])
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || code < 100 || code > 999 {
		return answerHead{}, errMalformedAnswer
	}
	h := answerHead{code: code, status: rest, length: -1}
	for size := len(status); ; {
		l, err := r.line()
		if err != nil {
			return answerHead{}, err
		}
		if l == "" {
			return h, nil
		}
		if size += len(l); size > maxHeadBytes {
			return answerHead{}, errMalformedAnswer
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return answerHead{}, errMalformedAnswer
		}
		value = strings.TrimSpace(value)
		switch {
		case strings.EqualFold(name, "Content-Length"):
			if h.length, err = strconv.Atoi(value); err != nil || h.length < 0 {
				return answerHead{}, errMalformedAnswer
			}
		case strings.EqualFold(name, "Transfer-Encoding"):
			h.chunked = strings.EqualFold(value, "chunked")
		}
	}
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
		if err != nil || len(out)+int(n) > maxAnswerBytes {
			return nil, errMalformedAnswer
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
		out = append(out, chunk[:n]...)
	}
}
