package main

import (
	"errors"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The DEL the daemon gave no answer to runs in cninet, not in the shim:
// it needs the whole of cninet (libcni, the registry, the cleanup), which
// the shim would otherwise link and pay for at each start. The shim runs
// `cninet shim-del` (thickwire.ShimDelCommand) with the request on its
// stdin, bounded by the config's "timeout", and passes its answer on.

// cninetFor is the cninet executable that runs a DEL for a shim of conf:
// the config's "cninet", else cninet in the directory of the shim's
// executable. where says which, for messages.
func (s *shim) cninetFor(conf *config) (path, where string, err error) {
	if conf.cninet != "" {
		return conf.cninet, `named by the shim config's "cninet"`, nil
	}
	dir, err := s.exeDir()
	if err != nil {
		return "", "", err
	}
	return dir + "/cninet", "next to cninet-shim", nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// delByCninet runs the DEL of body (the request the daemon gave no
// answer to, none) in cninet, under the host registry's locks and with
// the daemon's info file, as the daemon would run it, within the
// config's "timeout" (cninet's own deadline, --timeout; the shim kills
// it when it has not ended the grace after). cninet's CNI error is the
// runtime's; cninet missing, or not one the shim may run (openExecutable),
// or killed, is code 102 saying where it was looked for and how to
// install it, or that it was killed.
func (s *shim) delByCninet(conf *config, body []byte, none *noAnswer) error {
	path, where, err := s.cninetFor(conf)
	exe := -1
	if err == nil {
		exe, err = openExecutable(path)
	}
	if err != nil {
		return newError(thickwire.CodeCleanupFailed, "cninet-shim: "+none.Error()+"; the DEL could not run in cninet instead: "+err.Error()+
			" (cninet "+where+"; install cninet next to the shim, as `make install` does, or name it in the shim config's \"cninet\")", "")
	}
	defer syscall.Close(exe)
	s.times.mark("fallback")
	limit := conf.limits.Timeout
	argv := []string{path, thickwire.ShimDelCommand, "--socket=" + conf.socket, "--timeout=" + limit.String(), "--why=" + none.Error()}
	out, status, err := run(exe, argv, body, time.Now().Add(limit+s.cninetGrace))
	var timeout *timeoutError
	switch {
	case errors.As(err, &timeout):
		return newError(thickwire.CodeCleanupFailed, "cninet-shim: "+none.Error()+"; the DEL run in "+path+" instead did not end within the shim config's \"timeout\" ("+
			limit.String()+", and "+s.cninetGrace.String()+" more for its answer): killed", "a DEL again finishes it")
	case err != nil:
		return newError(thickwire.CodeCleanupFailed, "cninet-shim: "+none.Error()+"; the DEL could not run in "+path+" instead: "+err.Error(), "")
	case status.Exited() && status.ExitStatus() == 0:
		return nil
	}
	if cerr := readError(out); cerr != nil {
		return cerr
	}
	how := "exited with status " + strconv.Itoa(status.ExitStatus())
	if status.Signaled() {
		how = "was killed by signal " + strconv.Itoa(int(status.Signal()))
	}
	return newError(thickwire.CodeCleanupFailed, "cninet-shim: "+none.Error()+"; the DEL run in "+path+" instead "+how+
		" without a CNI error (is it the cninet of this shim's release?)", string(out))
}

// run runs the executable open at exe (argv[0] its name, for messages)
// with stdin on its standard input, its standard error the shim's, and
// returns what it printed on its standard output and how it ended. The
// environment is the shim's (the runtime's, as the plugins would see
// it). One still running at by is killed (SIGKILL) and reaped: the error
// is then a timeoutError.
//
// It is exec'd by its descriptor (/proc/self/fd/N), so what runs is the
// file openExecutable checked, whatever the path names by now. It is
// not killed when the shim dies (no Pdeathsig): a runtime that gives up
// on the shim (its own timeout) leaves the DEL running to its end,
// bounded by its --timeout, under the registry's locks; a DEL half done
// would leave state behind, and the runtime's next DEL waits for this
// one on the lock of the container id.
func run(exe int, argv []string, stdin []byte, by time.Time) ([]byte, syscall.WaitStatus, error) {
	var in, out [2]int
	if err := syscall.Pipe2(in[:], syscall.O_CLOEXEC); err != nil {
		return nil, 0, syscallError("pipe", err)
	}
	if err := syscall.Pipe2(out[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(in[0])
		syscall.Close(in[1])
		return nil, 0, syscallError("pipe", err)
	}
	c := &stream{rfd: out[0], wfd: in[1], pending: stdin, closeWhenSent: true}
	defer c.close()
	// The child's ends stay blocking (each end of a pipe is a file of
	// its own); the shim's are not, so that it waits with poll, until by.
	if err := errors.Join(syscall.SetNonblock(out[0], true), syscall.SetNonblock(in[1], true)); err != nil {
		syscall.Close(in[0])
		syscall.Close(out[1])
		return nil, 0, syscallError("pipe", err)
	}
	self := "/proc/self/fd/" + strconv.Itoa(exe) // open until the exec, which closes it (O_CLOEXEC)
	pid, err := syscall.ForkExec(self, argv, &syscall.ProcAttr{Env: syscall.Environ(), Files: []uintptr{uintptr(in[0]), uintptr(out[1]), 2}})
	syscall.Close(in[0])
	syscall.Close(out[1])
	if err != nil {
		return nil, 0, syscallError("exec "+argv[0]+" (by its descriptor, as "+self+")", err)
	}
	var printed []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.read(buf, by)
		if err == io.EOF {
			break
		}
		if err != nil {
			syscall.Kill(pid, syscall.SIGKILL)
			reap(pid)
			return nil, 0, err
		}
		if len(printed) < maxAnswerBytes { // the rest is read and dropped, so that cninet never waits on the pipe
			printed = append(printed, buf[:n]...)
		}
	}
	status, err := reap(pid)
	return printed, status, err
}

// reap waits for the child pid to end.
func reap(pid int) (syscall.WaitStatus, error) {
	var status syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &status, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, syscallError("wait", err)
		}
		return status, nil
	}
}
