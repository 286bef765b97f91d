package main

import (
	"strconv"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// config is what the shim reads of its own config; the daemon reads the
// rest (owner, capabilities, prevResult, valid attachments) and refuses
// what it cannot use.
type config struct {
	// socket is the daemon's socket ("socket", else thickwire.DefaultSocket).
	socket string
	// limits are how long the command waits for the daemon ("timeout").
	limits thickwire.Limits
	// cninet is the cninet executable that runs the DEL when the daemon
	// gives no answer ("cninet"); "": the one next to the shim.
	cninet string
}

// readConfig reads the config of command: a "socket" that is a clean
// absolute path, a "timeout" that is a positive Go duration and a
// "cninet" that is a clean absolute path. Stdin that is no JSON object,
// or one of these keys not a string, is code 6; a value the shim cannot
// use code 7 naming the key.
func readConfig(data []byte, command string) (*config, *cniError) {
	members, err := readObject(data)
	if err != nil {
		return nil, newError(codeDecodingFailure, "cninet-shim: config is not a CNI network config", err.Error())
	}
	var conf config
	var socket, timeout string
	for _, key := range []struct {
		name  string
		value *string
	}{{"socket", &socket}, {"timeout", &timeout}, {"cninet", &conf.cninet}} {
		if *key.value, err = stringMember(members, key.name); err != nil {
			return nil, newError(codeDecodingFailure, "cninet-shim: config key "+strconv.Quote(key.name)+", want a string", err.Error())
		}
	}
	conf.socket = socket
	if conf.socket == "" {
		conf.socket = thickwire.DefaultSocket
	}
	if !isCleanAbs(conf.socket) {
		return nil, newError(codeInvalidNetworkConfig, "cninet-shim: socket "+strconv.Quote(conf.socket)+
			", want a clean absolute path (like "+strconv.Quote(cleanAbs(conf.socket))+"): the daemon's info file beside it is found by it", "")
	}
	if conf.cninet != "" && !isCleanAbs(conf.cninet) {
		return nil, newError(codeInvalidNetworkConfig, "cninet-shim: config key \"cninet\" is "+strconv.Quote(conf.cninet)+
			", want the clean absolute path of the cninet executable (like "+strconv.Quote(cleanAbs(conf.cninet))+")", "")
	}
	if conf.limits, err = thickwire.ShimLimits(command, timeout); err != nil {
		return nil, newError(codeInvalidNetworkConfig, err.Error(), "")
	}
	return &conf, nil
}

// isCleanAbs says whether p is an absolute path with no "." or ".."
// element, no doubled or trailing slash: as filepath.Clean leaves one.
func isCleanAbs(p string) bool { return p != "" && p[0] == '/' && cleanAbs(p) == p }

// cleanAbs is p made absolute and clean, as filepath.Clean("/"+p) is:
// "." elements and doubled slashes dropped, ".." taking the element
// before it, no trailing slash but the root's.
func cleanAbs(p string) string {
	var parts []string
	for start, i := 0, 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		switch part := p[start:i]; part {
		case "", ".":
		case "..":
			if len(parts) > 0 {
				parts = parts[:len(parts)-1]
			}
		default:
			parts = append(parts, part)
		}
		start = i + 1
	}
	out := ""
	for _, part := range parts {
		out += "/" + part
	}
	if out == "" {
		return "/"
	}
	return out
}
