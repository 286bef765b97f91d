package main

import (
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The shim is a CNI plugin as libcni's skel makes one, without skel
// (which links the CNI types, their converters and regexp): it reads the
// same environment and stdin, refuses with the same CNI codes in the same
// order, and prints its errors as skel does. TestTheCNIFrontReadsAsSkel
// compares the two.

// CNI error codes of the spec that the shim itself answers with.
const (
	codeIncompatibleCNIVersion uint = 1
	codeInvalidEnvironment     uint = 4
	codeIOFailure              uint = 5
	codeDecodingFailure        uint = 6
	codeInvalidNetworkConfig   uint = 7
	codeTryAgainLater          uint = 11
	codePluginNotAvailable     uint = 50
	codeInternal               uint = 999
)

// cniError is a CNI error: what the runtime reads on stdout.
type cniError struct {
	Code    uint
	Msg     string
	Details string
}

func (e *cniError) Error() string {
	if e.Details != "" {
		return e.Msg + "; " + e.Details
	}
	return e.Msg
}

func newError(code uint, msg, details string) *cniError {
	return &cniError{Code: code, Msg: msg, Details: details}
}

// encode is the error as skel prints it: a JSON object indented by four
// spaces, without a newline at the end.
func (e *cniError) encode() []byte {
	b := append([]byte("{\n    \"code\": "), strconv.FormatUint(uint64(e.Code), 10)...)
	b = appendString(append(b, ",\n    \"msg\": "...), e.Msg)
	if e.Details != "" {
		b = appendString(append(b, ",\n    \"details\": "...), e.Details)
	}
	return append(b, "\n}"...)
}

// cniArgs are a command's CNI_* environment and its config on stdin.
type cniArgs struct {
	ContainerID, Netns, IfName, Args, Path string
	StdinData                              []byte
}

// cniCommands are the shim's commands, as CNI names them.
type cniCommands struct {
	Add, Del, Check, Status, GC func(*cniArgs) error
}

// cniEnv is one env variable the shim reads, the commands that need it,
// and how a value is checked.
type cniEnv struct {
	name     string
	value    *string
	required []string
	check    func(string) *cniError
}

// pluginMain runs the command the environment names with commands, as
// skel's PluginMainFuncsWithError does: the missing or bad environment,
// a config that is no JSON object or names no valid network, a CNI
// version the shim does not speak or that has no such command, each a
// CNI error, in skel's order. Without CNI_COMMAND it prints what it is and
// the versions to stderr and succeeds; VERSION names cninet's version.
func pluginMain(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, commands cniCommands, version string) *cniError {
	var command string
	args := &cniArgs{}
	all := []string{thickwire.CmdAdd, thickwire.CmdCheck, thickwire.CmdDel, thickwire.CmdGC, thickwire.CmdStatus}
	attachment := []string{thickwire.CmdAdd, thickwire.CmdCheck, thickwire.CmdDel}
	var override string
	vars := []cniEnv{
		{"CNI_COMMAND", &command, all, nil},
		{"CNI_CONTAINERID", &args.ContainerID, attachment, checkContainerID},
		{"CNI_NETNS", &args.Netns, []string{thickwire.CmdAdd, thickwire.CmdCheck}, nil},
		{"CNI_IFNAME", &args.IfName, attachment, checkIfName},
		{"CNI_ARGS", &args.Args, nil, nil},
		{"CNI_PATH", &args.Path, all, nil},
		{"CNI_NETNS_OVERRIDE", &override, nil, nil},
	}
	var missing []string
	for _, v := range vars {
		*v.value = getenv(v.name)
		needed := contains(v.required, command)
		switch {
		case *v.value == "" && (needed || v.name == "CNI_COMMAND"):
			missing = append(missing, v.name)
		case *v.value != "" && needed && v.check != nil:
			if err := v.check(*v.value); err != nil {
				return err
			}
		}
	}
	if len(missing) > 0 {
		if command == "" {
			io.WriteString(stderr, about(version)+"\nCNI protocol versions supported: "+strings.Join(thickwire.CNIVersions, ", ")+"\n")
			return nil
		}
		return newError(codeInvalidEnvironment, "required env variables ["+strings.Join(missing, ",")+"] missing", "")
	}
	if command == "VERSION" {
		if _, err := stdout.Write(versionAnswer(version)); err != nil {
			return newError(codeIOFailure, err.Error(), "")
		}
		return nil
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		return newError(codeIOFailure, "error reading from stdin: "+err.Error(), "")
	}
	args.StdinData = data
	members, cerr := checkConfig(data)
	if cerr != nil {
		return cerr
	}
	since := map[string]string{thickwire.CmdCheck: "0.4.0", thickwire.CmdGC: "1.1.0", thickwire.CmdStatus: "1.1.0"}
	switch command {
	case thickwire.CmdAdd:
		return call(members, commands.Add, args)
	case thickwire.CmdDel:
		return call(members, commands.Del, args)
	case thickwire.CmdCheck:
		return callSince(members, command, since[command], commands.Check, args)
	case thickwire.CmdGC:
		return callSince(members, command, since[command], commands.GC, args)
	case thickwire.CmdStatus:
		return callSince(members, command, since[command], commands.Status, args)
	}
	return newError(codeInvalidEnvironment, "unknown CNI_COMMAND: "+command, "")
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// checkConfig wants stdin to be a JSON object (code 6) naming a valid
// network (code 7), and returns its members.
func checkConfig(data []byte) ([]jsonMember, *cniError) {
	members, err := readObject(data)
	if err != nil {
		return nil, newError(codeDecodingFailure, "error unmarshall network config: "+err.Error(), "")
	}
	name, err := stringMember(members, "name")
	switch {
	case err != nil:
		return nil, newError(codeDecodingFailure, "error unmarshall network config: "+err.Error(), "")
	case name == "":
		return nil, newError(codeInvalidNetworkConfig, "missing network name", "")
	case !thickwire.IsCNIName(name):
		return nil, newError(codeInvalidNetworkConfig, "invalid characters found in network name", name)
	}
	return members, nil
}

// configVersion is the config's cniVersion; none is 0.1.0, as CNI says.
func configVersion(members []jsonMember) (string, *cniError) {
	v, err := stringMember(members, "cniVersion")
	if err != nil {
		return "", newError(codeDecodingFailure, "decoding version from network config: "+err.Error(), "")
	}
	if v == "" {
		return "0.1.0", nil
	}
	return v, nil
}

// call runs command when the config's version is one the shim speaks.
func call(members []jsonMember, command func(*cniArgs) error, args *cniArgs) *cniError {
	v, cerr := configVersion(members)
	if cerr != nil {
		return cerr
	}
	if !contains(thickwire.CNIVersions, v) {
		return newError(codeIncompatibleCNIVersion, "incompatible CNI versions",
			"config is "+strconv.Quote(v)+", plugin supports "+quoteAll(thickwire.CNIVersions))
	}
	if command == nil {
		return nil
	}
	if err := command(args); err != nil {
		if cerr, ok := err.(*cniError); ok {
			return cerr
		}
		return newError(codeInternal, err.Error(), "")
	}
	return nil
}

// callSince runs a command that CNI has since version since (CHECK,
// STATUS, GC): a config of an older version is code 1, one whose version
// is no version code 6.
func callSince(members []jsonMember, name, since string, command func(*cniArgs) error, args *cniArgs) *cniError {
	v, cerr := configVersion(members)
	if cerr != nil {
		return cerr
	}
	if ok, err := atLeast(v, since); err != nil {
		return newError(codeDecodingFailure, err.Error(), "")
	} else if !ok {
		return newError(codeIncompatibleCNIVersion, "config version does not allow "+name, "")
	}
	// Some version the shim speaks is at least the config's (the newest
	// is, whenever the config's is one it speaks).
	if ok, _ := atLeast(thickwire.CNIVersions[len(thickwire.CNIVersions)-1], v); !ok {
		return newError(codeIncompatibleCNIVersion, "plugin version does not allow "+name, "")
	}
	return call(members, command, args)
}

// atLeast says whether CNI version a is b or later; "" is 0.1.0, and a
// version is up to three dot-separated integers.
func atLeast(a, b string) (bool, error) {
	va, err := parseVersion(a)
	if err != nil {
		return false, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return false, err
	}
	for i := range va {
		if va[i] != vb[i] {
			return va[i] > vb[i], nil
		}
	}
	return true, nil
}

func parseVersion(v string) ([3]int, error) {
	if v == "" {
		return [3]int{0, 1, 0}, nil
	}
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return [3]int{}, &cniError{Msg: "invalid version " + strconv.Quote(v) + ": too many parts"}
	}
	var out [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return [3]int{}, &cniError{Msg: "failed to convert version part " + strconv.Quote(p) + " of " + strconv.Quote(v) + ": " + err.Error()}
		}
		out[i] = n
	}
	return out, nil
}

func quoteAll(list []string) string {
	quoted := make([]string, len(list))
	for i, s := range list {
		quoted[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(quoted, " ") + "]"
}

// checkContainerID wants a CNI container id.
func checkContainerID(id string) *cniError {
	if !thickwire.IsCNIName(id) {
		return newError(codeInvalidEnvironment, "invalid characters in containerID", id)
	}
	return nil
}

// maxIfNameLength is the longest interface name Linux takes.
const maxIfNameLength = 15

// checkIfName wants an interface name Linux takes.
func checkIfName(name string) *cniError {
	switch {
	case len(name) > maxIfNameLength:
		return newError(codeInvalidEnvironment, "interface name is too long", "interface name should be less than "+strconv.Itoa(maxIfNameLength+1)+" characters")
	case name == "." || name == "..":
		return newError(codeInvalidEnvironment, "interface name is . or ..", "")
	}
	for _, r := range name {
		if r == '/' || r == ':' || unicode.IsSpace(r) {
			return newError(codeInvalidEnvironment, "interface name contains / or : or whitespace characters", "")
		}
	}
	return nil
}
