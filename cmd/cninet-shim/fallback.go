package main

import (
	"strconv"
	"syscall"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The DEL the daemon gave no answer to runs in cninet, not in the shim:
// it needs the whole of cninet (libcni, the registry, the cleanup), which
// the shim would otherwise link and pay for at each start. The shim runs
// `cninet shim-del` (thickwire.ShimDelCommand) with the request on its
// stdin and passes its answer on.

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

// checkExecutable wants path to be a regular executable file that only
// root (or the shim's own user) can change: the shim runs it as root.
func checkExecutable(path string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return syscallError("stat "+path, err)
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return errorString(path + " is not a regular file")
	case st.Mode&0o111 == 0:
		return errorString(path + " is not executable")
	case st.Uid != 0 && int(st.Uid) != syscall.Geteuid():
		return errorString(path + " is owned by uid " + strconv.Itoa(int(st.Uid)) + ", want root")
	case st.Mode&0o022 != 0:
		return errorString(path + " is writable by group or others (mode " + strconv.FormatUint(uint64(st.Mode&0o7777), 8) + ")")
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// delByCninet runs the DEL of body (the request the daemon gave no
// answer to, none) in cninet, under the host registry's locks and with
// the daemon's info file, as the daemon would run it. cninet's CNI error
// is the runtime's; cninet missing, or not one the shim may run, is code
// 102 saying where it was looked for and how to install it.
func (s *shim) delByCninet(conf *config, body []byte, none *noAnswer) error {
	path, where, err := s.cninetFor(conf)
	if err == nil {
		err = checkExecutable(path)
	}
	if err != nil {
		return newError(thickwire.CodeCleanupFailed, "cninet-shim: "+none.Error()+"; the DEL could not run in cninet instead: "+err.Error()+
			" (cninet "+where+"; install cninet next to the shim, as `make install` does, or name it in the shim config's \"cninet\")", "")
	}
	s.times.mark("fallback")
	out, status, err := run(path, []string{path, thickwire.ShimDelCommand, "--socket=" + conf.socket, "--why=" + none.Error()}, body)
	switch {
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

// run runs argv[0] at path with stdin on its standard input, its
// standard error the shim's, and returns what it printed on its
// standard output and how it ended. The environment is the shim's (the
// runtime's, as the plugins would see it).
func run(path string, argv []string, stdin []byte) ([]byte, syscall.WaitStatus, error) {
	var in, out [2]int
	if err := syscall.Pipe2(in[:], syscall.O_CLOEXEC); err != nil {
		return nil, 0, syscallError("pipe", err)
	}
	if err := syscall.Pipe2(out[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(in[0])
		syscall.Close(in[1])
		return nil, 0, syscallError("pipe", err)
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: syscall.Environ(), Files: []uintptr{uintptr(in[0]), uintptr(out[1]), 2}})
	syscall.Close(in[0])
	syscall.Close(out[1])
	if err != nil {
		syscall.Close(in[1])
		syscall.Close(out[0])
		return nil, 0, syscallError("exec "+path, err)
	}
	// cninet reads all of its stdin before it writes anything, so this
	// write, then the read, cannot wait on each other.
	(&fdWriter{fd: in[1]}).Write(stdin)
	syscall.Close(in[1])
	var printed []byte
	buf := make([]byte, 4096)
	for {
		n, err := syscall.Read(out[0], buf)
		if err == syscall.EINTR {
			continue
		}
		if n <= 0 {
			break
		}
		if len(printed) < maxAnswerBytes { // the rest is read and dropped, so that cninet never waits on the pipe
			printed = append(printed, buf[:n]...)
		}
	}
	syscall.Close(out[0])
	var status syscall.WaitStatus
	for {
		_, err = syscall.Wait4(pid, &status, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, 0, syscallError("wait", err)
	}
	return printed, status, nil
}
