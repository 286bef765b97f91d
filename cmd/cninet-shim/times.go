package main

import (
	"strconv"
	"syscall"
	"time"
)

// times records when each step of a command happened, for the
// benchmarks' account of the hand-off (thickwire.ShimTimesEnv): main,
// then dialed, sent, acknowledged (when the daemon did), answered (the
// final answer's head), read (its body), printed (ADD's result), fallback
// (a DEL handed to cninet), and exit. Unasked, it records nothing.
type times struct {
	file  string
	marks []byte // " step=unixnano" each
}

func now() time.Time { return time.Now() }

// startTimes records into file, an absolute path ("" or any other: not
// at all), from the start of main.
func startTimes(file string, start time.Time) *times {
	if file == "" || file[0] != '/' {
		return &times{}
	}
	t := &times{file: file}
	t.markAt("main", start)
	return t
}

func (t *times) mark(step string) {
	if t.file != "" {
		t.markAt(step, time.Now())
	}
}

func (t *times) markAt(step string, at time.Time) {
	t.marks = strconv.AppendInt(append(append(t.marks, ' '), step+"="...), at.UnixNano(), 10)
}

// write appends the command's line, "cninet-shim COMMAND ID IFNAME
// code=N main=… … exit=…", to the file; a file that cannot be written
// loses the line, never the command.
func (t *times) write(command, id, ifName string, code int) {
	if t.file == "" {
		return
	}
	t.mark("exit")
	line := append([]byte("cninet-shim "+command+" "+orDash(id)+" "+orDash(ifName)+" code="+strconv.Itoa(code)), t.marks...)
	fd, err := syscall.Open(t.file, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_CREAT|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	syscall.Write(fd, append(line, '\n'))
	syscall.Close(fd)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
