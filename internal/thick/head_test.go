package thick

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

func TestRequestHead(t *testing.T) {
	ackBy := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	cases := []struct {
		name    string
		headers map[string]string
		want    *Request // nil with ok: refused
		ok      bool
		inErr   string
	}{
		{"no protocol header is a shim of protocol 1: no head", map[string]string{HeaderCommand: "ADD"}, nil, false, ""},
		{"a whole head is read", map[string]string{HeaderProtocol: "2", HeaderCommand: "DEL", HeaderShimVersion: "v1.2.3", HeaderAckBy: ackBy.Format(time.RFC3339Nano)},
			&Request{Protocol: 2, Command: "DEL", ShimVersion: "v1.2.3", AckBy: &ackBy}, true, ""},
		{"a protocol that is no number is refused naming the header", map[string]string{HeaderProtocol: "two", HeaderCommand: "DEL"}, nil, true, HeaderProtocol},
		{"an unknown command is refused naming the commands", map[string]string{HeaderProtocol: "2", HeaderCommand: "ATTACH"}, nil, true, "want ADD, DEL"},
		{"a deadline that is no time is refused naming the header", map[string]string{HeaderProtocol: "2", HeaderCommand: "ADD", HeaderDeadline: "soon"}, nil, true, HeaderDeadline},
		{"a protocol the daemon does not speak is passed on for CheckProtocol to refuse", map[string]string{HeaderProtocol: "99", HeaderCommand: "WHATEVER"},
			&Request{Protocol: 99, Command: "WHATEVER"}, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.headers {
				h.Set(k, v)
			}
			head, ok, err := RequestHead(h)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if tc.inErr != "" {
				if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.inErr) {
					t.Fatalf("err = %v, want ErrBadRequest naming %q", err, tc.inErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(head)
			want, _ := json.Marshal(tc.want)
			if string(got) != string(want) {
				t.Fatalf("head %s, want %s", got, want)
			}
		})
	}
}

func TestSetHeadRoundTrips(t *testing.T) {
	ackBy, deadline := time.Now().Add(time.Second), time.Now().Add(time.Minute)
	req := &Request{Protocol: ProtocolVersion, Command: CmdAdd, ShimVersion: "v0.1.0", AckBy: &ackBy, Deadline: &deadline}
	h := http.Header{}
	req.SetHead(h)
	head, ok, err := RequestHead(h)
	if err != nil || !ok {
		t.Fatalf("RequestHead: %v, %v", ok, err)
	}
	if err := matchHead(req, head); err != nil {
		t.Fatalf("the head read back differs from the request: %v", err)
	}
}

// headPost posts body with the head of req, as a shim of protocol 2
// does; sent counts the body's bytes the client has written.
func headPost(c *http.Client, req *Request, body io.Reader, acknowledged chan<- struct{}) (int, types.Error, error) {
	var cerr types.Error
	ctx := context.Background()
	if acknowledged != nil {
		var once sync.Once
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(int, textproto.MIMEHeader) error {
			once.Do(func() { close(acknowledged) })
			return nil
		}})
	}
	post, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://cninet"+RequestPath, body)
	if err != nil {
		return 0, cerr, err
	}
	req.SetHead(post.Header)
	resp, err := c.Do(post)
	if err != nil {
		return 0, cerr, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		json.Unmarshal(b, &cerr)
	}
	return resp.StatusCode, cerr, nil
}

// countingReader counts what the HTTP client took of a body.
type countingReader struct {
	r    io.Reader
	read atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// bigDel is a DEL of id whose body is about size bytes (a runtimeConfig
// padded out), in protocol.
func bigDel(t *testing.T, id string, protocol, size int) (*Request, []byte) {
	t.Helper()
	conf := `{"cniVersion":"1.1.0","name":"web","type":"cninet-shim","runtimeConfig":{"pad":"` + strings.Repeat("x", size) + `"}}`
	req := &Request{Protocol: protocol, Command: CmdDel, ContainerID: id, IfName: "eth0", Config: json.RawMessage(conf)}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return req, b
}

// A request of protocol 2 waits for its slot with its body unread: a
// queue of requests holds no bodies in the daemon. A body far larger
// than the socket's buffers shows it: the client cannot send it all
// until the daemon reads.
func TestServerReadsABodyOnlyOnceASlotIsFree(t *testing.T) {
	const size = 900 << 10 // within MaxRequestBytes, far beyond a unix socket's buffers
	h := newSlotHolder()
	defer h.free()
	c := startServer(t, &Server{run: h.run, MaxConcurrent: 1, AllowPeer: func(uint32) bool { return true }})
	go tryPost(c, reqBody("DEL", "c1", "", "eth0", shimConf)) // holds the only slot
	waitFor(t, "c1 to run", func() bool { return slices.Contains(h.ranNow(), "c1") })

	req, b := bigDel(t, "c2", ProtocolVersion, size)
	body := &countingReader{r: strings.NewReader(string(b))}
	acknowledged := make(chan struct{})
	answered := make(chan error, 1)
	go func() {
		code, cerr, err := headPost(c, req, body, acknowledged)
		if err == nil && code != http.StatusOK {
			err = errors.New(cerr.Msg)
		}
		answered <- err
	}()
	select {
	case <-acknowledged:
	case <-time.After(10 * time.Second):
		t.Fatal("no acknowledgement of the queued request within 10s")
	}
	time.Sleep(100 * time.Millisecond) // the client writes what the socket takes
	if sent := body.read.Load(); sent >= int64(len(b)) {
		t.Fatalf("the client sent the whole %d-byte body while the request waited for a slot: the daemon read it", sent)
	}
	h.free()
	if err := <-answered; err != nil {
		t.Fatalf("once the slot was free: %v, want the request served", err)
	}
	if got := h.ranNow(); !slices.Contains(got, "c2") {
		t.Fatalf("ran %v, want c2 run once its body was read", got)
	}
}

// A request of protocol 2 whose shim hangs up while it waits for a slot
// is refused unrun when its slot comes, though its body was never read
// (net/http notices a hang-up only after the body).
func TestServerRefusesAQueuedRequestWhoseShimHungUp(t *testing.T) {
	h := newSlotHolder()
	defer h.free()
	results := make(chan string, 4)
	s := &Server{run: h.run, MaxConcurrent: 1, AllowPeer: func(uint32) bool { return true },
		Observe: func(command, result string, _ time.Duration) { results <- result }}
	c := startServer(t, s)
	go tryPost(c, reqBody("DEL", "c1", "", "eth0", shimConf))
	waitFor(t, "c1 to run", func() bool { return slices.Contains(h.ranNow(), "c1") })

	req, b := bigDel(t, "c2", ProtocolVersion, 16)
	conn, err := c.Transport.(*http.Transport).DialContext(context.Background(), "unix", "")
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{}
	req.SetHead(hdr)
	var head strings.Builder
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: cninet\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", RequestPath, len(b))
	hdr.Write(&head)
	if _, err := io.WriteString(conn, head.String()+"\r\n"+string(b)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, fmt.Sprint(StatusAcknowledged)) {
		t.Fatalf("first answer line %q (%v), want the acknowledgement", status, err)
	}
	conn.Close() // the shim hangs up while its request waits for a slot
	h.free()
	for range 2 {
		select {
		case result := <-results:
			if result == "11" {
				if got := h.ranNow(); slices.Contains(got, "c2") {
					t.Fatalf("ran %v: the request of the shim that hung up ran", got)
				}
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no answer to the hung-up request within 10s")
		}
	}
	t.Fatalf("ran %v: want the hung-up request refused with code 11", h.ranNow())
}

// The daemon queues a request by its head: a body that says another
// command or other limits is refused unrun.
func TestServerRefusesABodyThatContradictsItsHead(t *testing.T) {
	var ran atomic.Int32
	run := func(context.Context, *Request, *NetConf) ([]byte, error) { ran.Add(1); return nil, nil }
	c := startServer(t, &Server{run: run, AllowPeer: func(uint32) bool { return true }})
	_, b := bigDel(t, "c1", ProtocolVersion, 1)
	for _, head := range []*Request{
		{Protocol: ProtocolVersion, Command: CmdStatus},
		{Protocol: 1, Command: CmdDel},
	} {
		code, cerr, err := headPost(c, head, strings.NewReader(string(b)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusBadRequest || cerr.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(cerr.Msg, errHeadMismatch.Error()) || ran.Load() != 0 {
			t.Fatalf("head %s protocol %d over a DEL body: HTTP %d %+v, ran %d; want a refusal saying %q, nothing run",
				head.Command, head.Protocol, code, cerr, ran.Load(), errHeadMismatch)
		}
	}
}
