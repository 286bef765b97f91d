package main

import (
	"errors"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// shim runs the CNI commands; its fields are the seams tests replace.
type shim struct {
	stdout io.Writer
	// version is cninet's version, sent with each request.
	version string
	// owner is the calling runtime's executable name ("" when it cannot
	// be told): the owner of its attachments when the config names none.
	owner func() string
	// exeDir is the directory of the shim's executable, where its DEL
	// finds cninet when the config names none.
	exeDir func() (string, error)
	// dialTimeout bounds reaching the daemon (within the silence limit).
	dialTimeout time.Duration
	// answerGrace is how long past the request's deadline the shim still
	// waits for the daemon's final answer.
	answerGrace time.Duration
	// cninetGrace is how long past its --timeout the shim waits for the
	// cninet that runs a DEL the daemon gave no answer to before it
	// kills it.
	cninetGrace time.Duration
	// times, when asked for, records the moments of the command's steps.
	times *times
}

func newShim(stdout io.Writer) *shim {
	return &shim{stdout: stdout, owner: runtimeName, exeDir: exeDir, dialTimeout: 3 * time.Second,
		answerGrace: thickwire.AnswerGrace, cninetGrace: thickwire.AnswerGrace, times: &times{}}
}

func (s *shim) commands() cniCommands {
	return cniCommands{Add: s.add, Del: s.del, Check: s.check, Status: s.status, GC: s.gc}
}

// runtimeName is the calling runtime's executable name (containerd,
// crio, podman, cnitool …): the owner of its attachments when the shim's
// config names none. "" when it cannot be told.
func runtimeName() string {
	exe, err := readlink("/proc/" + strconv.Itoa(syscall.Getppid()) + "/exe")
	if err != nil {
		return ""
	}
	name := exe[lastSlash(exe)+1:]
	if n := len(name) - len(" (deleted)"); n > 0 && name[n:] == " (deleted)" {
		name = name[:n]
	}
	if !thickwire.IsOwnerName(name) {
		return ""
	}
	return name
}

// exeDir is the directory of the shim's executable file, symbolic
// links resolved (/proc/self/exe).
func exeDir() (string, error) {
	exe, err := readlink("/proc/self/exe")
	if err != nil {
		return "", err
	}
	return exe[:max(lastSlash(exe), 1)], nil
}

// readlink is the target of the symbolic link at path.
func readlink(path string) (string, error) {
	for size := 256; ; size *= 4 { // a small buffer first: most paths fit
		buf := make([]byte, size)
		n, err := syscall.Readlink(path, buf)
		if err != nil {
			return "", syscallError("readlink "+path, err)
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// add forwards the ADD and prints the daemon's result, which it sends in
// the CNI version of the config.
func (s *shim) add(args *cniArgs) error {
	conf, cerr := readConfig(args.StdinData, thickwire.CmdAdd)
	if cerr != nil {
		return cerr
	}
	result, err := s.forward(conf, s.request(thickwire.CmdAdd, args, conf))
	if err != nil {
		return noAnswerIs(err, codeTryAgainLater)
	}
	if _, err := s.stdout.Write(result); err != nil {
		return newError(codeIOFailure, "cninet-shim: printing the result: "+err.Error(), "")
	}
	s.times.mark("printed")
	return nil
}

func (s *shim) check(args *cniArgs) error {
	return s.forwardOnly(args, thickwire.CmdCheck, codeTryAgainLater)
}
func (s *shim) status(args *cniArgs) error {
	return s.forwardOnly(args, thickwire.CmdStatus, codePluginNotAvailable)
}
func (s *shim) gc(args *cniArgs) error {
	return s.forwardOnly(args, thickwire.CmdGC, codeTryAgainLater)
}

// forwardOnly forwards a command whose answer is success or an error;
// a daemon that does not answer is CNI error code.
func (s *shim) forwardOnly(args *cniArgs, command string, code uint) error {
	conf, cerr := readConfig(args.StdinData, command)
	if cerr != nil {
		return cerr
	}
	_, err := s.forward(conf, s.request(command, args, conf))
	return noAnswerIs(err, code)
}

// del forwards the DEL; when the daemon gives no answer (cannot be
// reached, silent past the silence limit, or no final answer by the
// deadline), cninet runs it instead (delByCninet), with the daemon's
// conf dir, plugins, cache and registry: a DEL must never leave state
// behind because a daemon is down or stuck. An answer, error or not, is
// the runtime's: the daemon ran the DEL or decided not to (busy, an
// xtables lock held), and running it again would defeat that.
func (s *shim) del(args *cniArgs) error {
	conf, cerr := readConfig(args.StdinData, thickwire.CmdDel)
	if cerr != nil {
		return cerr
	}
	req := s.request(thickwire.CmdDel, args, conf)
	_, err := s.forward(conf, req)
	var none *noAnswer
	if !errors.As(err, &none) {
		return err
	}
	return s.delByCninet(conf, req.body(), none)
}

// request is one command as the daemon gets it.
type request struct {
	command string
	// protocol is the thick-mode protocol the request is sent in: the
	// oldest that has what the command needs (thickwire.ProtocolFor).
	protocol        int
	args            *cniArgs
	owner, version  string
	ackBy, deadline time.Time
	limits          thickwire.Limits
}

// request is command with args under conf, its limits counted from now.
func (s *shim) request(command string, args *cniArgs, conf *config) *request {
	now := time.Now()
	return &request{command: command, protocol: thickwire.ProtocolFor(command), args: args, owner: s.owner(), version: s.version,
		ackBy: now.Add(conf.limits.Silence), deadline: now.Add(conf.limits.Timeout), limits: conf.limits}
}

// body is the request as JSON, in the shape of internal/thick's Request.
func (r *request) body() []byte {
	a := r.args
	b := make([]byte, 0, 256+len(a.StdinData))
	b = appendString(append(b, `{"command":`...), r.command)
	for _, f := range []struct{ name, value string }{
		{"containerID", a.ContainerID}, {"netns", a.Netns}, {"ifName", a.IfName}, {"args", a.Args}, {"path", a.Path},
	} {
		if f.value != "" {
			b = appendString(append(b, `,"`+f.name+`":`...), f.value)
		}
	}
	b = append(append(b, `,"config":`...), a.StdinData...)
	if r.owner != "" {
		b = appendString(append(b, `,"owner":`...), r.owner)
	}
	b = strconv.AppendInt(append(b, `,"protocol":`...), int64(r.protocol), 10)
	if r.version != "" {
		b = appendString(append(b, `,"shimVersion":`...), r.version)
	}
	b = append(appendTime(append(b, `,"ackBy":"`...), r.ackBy), '"')
	b = append(appendTime(append(b, `,"deadline":"`...), r.deadline), '"')
	return append(b, '}')
}

// noAnswer: the daemon gave no answer to a request: it could not be
// reached (no socket, nobody listening, the dial timed out), it was
// silent past the silence limit (stopped, deadlocked), or it acknowledged
// the request and then sent no final answer before the deadline, or the
// connection broke before one.
type noAnswer struct {
	socket string
	why    string
	err    error
}

func (n *noAnswer) Error() string {
	return "cninet daemon at " + n.socket + " " + n.why + ": " + n.err.Error()
}

func (n *noAnswer) Unwrap() error { return n.err }

// noAnswerIs gives a daemon that did not answer the CNI code the command
// calls for; answers (errors the daemon sent) are returned as they are.
func noAnswerIs(err error, code uint) error {
	var none *noAnswer
	if errors.As(err, &none) {
		return newError(code, none.Error(), "is cninet daemon running? (systemctl status cninet)")
	}
	return err
}

// forward posts req to the daemon at conf's socket and returns its
// answer's body; the daemon's CNI error comes back as the *cniError it
// sent, no answer as a *noAnswer, an answer that could not be read (cut
// short, or not the daemon's protocol) as a *cniError of code 11. It
// waits limits.Silence for the first answer (the daemon's
// acknowledgement or its final answer), then, once acknowledged, until
// the request's deadline plus the grace for the final answer. The
// request is sent while the shim waits for answers: the daemon
// acknowledges a request by its head and reads the body only once a slot
// is free, so a body bigger than the socket's buffer is still being sent
// when the acknowledgement comes (and extends the wait), and an answer
// sent before the body was all read (a refusal) is read, not lost to a
// write that failed.
func (s *shim) forward(conf *config, req *request) ([]byte, error) {
	socket := conf.socket
	c, err := dialUnix(socket, minTime(req.ackBy, time.Now().Add(s.dialTimeout)))
	if err != nil {
		return nil, &noAnswer{socket: socket, why: "is unreachable", err: err}
	}
	defer c.close()
	s.times.mark("dialed")
	body := req.body()
	c.pending = append(postHead(len(body), req.protocol, req.command, req.version, req.ackBy, req.deadline), body...)
	c.sent = func() { s.times.mark("sent") }
	r := &answerReader{c: c, by: req.ackBy}
	acknowledged := false
	var h answerHead
	for {
		if h, err = r.head(); err != nil {
			return nil, unreadAnswer(socket, acknowledged, req.limits, s.answerGrace, c.sendErr, err)
		}
		if h.code >= 200 {
			break
		}
		if h.code == thickwire.StatusAcknowledged && !acknowledged {
			acknowledged = true
			r.by = req.deadline.Add(s.answerGrace)
			s.times.mark("acknowledged")
		}
	}
	c.stopSending() // the daemon answered: it reads no more
	s.times.mark("answered")
	r.by = time.Now().Add(req.limits.Silence) // the body comes with the head
	answer, err := r.body(h)
	var bad *malformedAnswer
	switch {
	case errors.As(err, &bad):
		return nil, notTheProtocol(socket, err)
	case err != nil:
		return nil, newError(codeTryAgainLater, "cninet daemon at "+socket+" answered "+h.status+", but the answer was cut short", err.Error())
	}
	s.times.mark("read")
	if h.code == 200 {
		return answer, nil
	}
	if cerr := readError(answer); cerr != nil {
		return nil, cerr
	}
	return nil, newError(codeInternal, "cninet daemon at "+socket+" answered "+h.status+" without a CNI error", string(answer))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// readError reads a CNI error object (code, msg, details); nil when
// data is none or its code is missing or 0.
func readError(data []byte) *cniError {
	members, err := readObject(data)
	if err != nil {
		return nil
	}
	var cerr cniError
	for _, m := range members {
		if equalFold(m.name, "code") {
			n, err := strconv.ParseUint(string(m.value), 10, 0)
			if err != nil {
				return nil
			}
			cerr.Code = uint(n)
		}
	}
	msg, err1 := stringMember(members, "msg")
	details, err2 := stringMember(members, "details")
	if cerr.Code == 0 || err1 != nil || err2 != nil {
		return nil
	}
	cerr.Msg, cerr.Details = msg, details
	return &cerr
}

// unreadAnswer is the error of a request whose answer's head could not
// be read (err): an answer begun and cut short, or one that is not the
// daemon's protocol, is code 11 (something answered: a DEL is not run
// again); else the daemon gave no answer (whyNoAnswer). sendErr is why
// the request could not all be sent, if it could not.
func unreadAnswer(socket string, acknowledged bool, limits thickwire.Limits, grace time.Duration, sendErr, err error) error {
	var bad *malformedAnswer
	var cut *answerCutShort
	switch {
	case errors.As(err, &bad):
		return notTheProtocol(socket, err)
	case errors.As(err, &cut):
		return newError(codeTryAgainLater, "cninet daemon at "+socket+" began an answer, but it was cut short", err.Error())
	}
	none := whyNoAnswer(socket, acknowledged, limits, grace, err)
	if sendErr != nil {
		none.why += " (the request was not all sent: " + sendErr.Error() + ")"
	}
	return none
}

// notTheProtocol is the error of an answer that is not the daemon's
// protocol (another server on the socket?).
func notTheProtocol(socket string, err error) *cniError {
	return newError(codeTryAgainLater, "cninet daemon at "+socket+" answered something that is not the daemon's protocol (is another server listening on the socket?)", err.Error())
}

// whyNoAnswer says why a request failed without an answer.
func whyNoAnswer(socket string, acknowledged bool, limits thickwire.Limits, grace time.Duration, err error) *noAnswer {
	var timeout *timeoutError
	timedOut := errors.As(err, &timeout)
	switch {
	case acknowledged && timedOut:
		return &noAnswer{socket: socket, why: "acknowledged the request but sent no answer within " + (limits.Timeout + grace).String(), err: err}
	case acknowledged:
		return &noAnswer{socket: socket, why: "acknowledged the request, then the connection broke without an answer", err: err}
	case timedOut:
		return &noAnswer{socket: socket, why: "did not answer within " + limits.Silence.String() + " (stopped or stalled)", err: err}
	}
	return &noAnswer{socket: socket, why: "closed the connection without an answer", err: err}
}
