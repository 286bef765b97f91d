package cninet

import (
	"fmt"
	"sort"
	"strings"

	cni "github.com/containerd/go-cni"
)

// ignoreUnknownArg tells plugins to accept args they do not know, so that
// identity args meant for one plugin (or for none) do not fail the others.
const ignoreUnknownArg = "IgnoreUnknown"

// cniArgs returns the CNI args for an allocation: IgnoreUnknown=1 first, then
// alloc.Args sorted by key, so that Setup, Check and Teardown of the same
// allocation always send the same args.
func cniArgs(alloc *Allocation) ([][2]string, error) {
	keys := make([]string, 0, len(alloc.Args))
	for k, v := range alloc.Args {
		if err := validateArg(k, v); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([][2]string, 0, 1+len(keys))
	args = append(args, [2]string{ignoreUnknownArg, "1"})
	for _, k := range keys {
		args = append(args, [2]string{k, alloc.Args[k]})
	}
	return args, nil
}

// validateArg enforces what CNI_ARGS can carry: it is a ';'-separated list
// of key=value pairs, so either character inside a key or value would
// silently become a different arg.
func validateArg(k, v string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: CNI arg with an empty key (value %q)", ErrInvalidAllocation, v)
	case strings.EqualFold(k, ignoreUnknownArg):
		return fmt.Errorf("%w: CNI arg %q is reserved: cninet always sends IgnoreUnknown=1", ErrInvalidAllocation, k)
	case strings.ContainsAny(k, ";="):
		return fmt.Errorf("%w: CNI arg key %q contains ';' or '=', which CNI_ARGS cannot carry", ErrInvalidAllocation, k)
	case strings.ContainsAny(v, ";="):
		return fmt.Errorf("%w: CNI arg %q has value %q containing ';' or '=', which CNI_ARGS cannot carry", ErrInvalidAllocation, k, v)
	}
	return nil
}

// attachment is everything the plugins are told about one allocation. It is
// computed once per call and identical for Setup, Check and Teardown, because
// portmap's DEL removes nothing unless it sees the same portMappings.
type attachment struct {
	id       string
	mappings []cni.PortMapping
	args     [][2]string
}

func newAttachment(alloc *Allocation, ignoreHostIP bool) (attachment, error) {
	if err := validateAllocation(alloc); err != nil {
		return attachment{}, err
	}
	mappings, err := PortMappings(alloc, ignoreHostIP)
	if err != nil {
		return attachment{}, err
	}
	args, err := cniArgs(alloc)
	if err != nil {
		return attachment{}, err
	}
	return attachment{id: alloc.ID, mappings: mappings, args: args}, nil
}

// opts returns the go-cni namespace options for this attachment.
func (a attachment) opts() []cni.NamespaceOpts {
	opts := make([]cni.NamespaceOpts, 0, 1+len(a.args))
	opts = append(opts, cni.WithCapabilityPortMap(a.mappings))
	for _, kv := range a.args {
		opts = append(opts, cni.WithArgs(kv[0], kv[1]))
	}
	return opts
}
