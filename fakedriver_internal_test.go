package cninet

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// driverCall is one call a fakeDriver received.
type driverCall struct {
	verb, network, ifName, id string
	mappings                  []cni.PortMapping
	args                      [][2]string
}

func (d driverCall) String() string { return d.verb + " " + d.network + "/" + d.ifName }

// fakeDriver stands for libcni: it records calls, fails as scripted, and
// caches each successful ADD's result as libcni does (and its DEL removes
// it), so that Teardown and Connect find what was attached.
type fakeDriver struct {
	mu        sync.Mutex
	calls     []driverCall
	addErrs   map[string][]error // per network, one per ADD, in order
	checkErrs map[string]error
	cacheDir  string
	// addHook, if set, runs inside ADD after it is recorded; a non-nil
	// error it returns fails the ADD.
	addHook func(ctx context.Context, att attachments.Attachment) error
	// delHook, if set, runs inside DEL after it is recorded.
	delHook func(ctx context.Context, id string)
}

// record notes a call and returns how many calls there are with it: an
// ADD's address is told apart by it, whatever ADDs run at once.
func (f *fakeDriver) record(verb string, req attachments.Request, att attachments.Attachment) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, driverCall{verb, att.Name(), att.IfName, req.ID, req.Mappings, req.Args})
	return len(f.calls)
}

func (f *fakeDriver) Add(ctx context.Context, req attachments.Request, att attachments.Attachment, netns string) (*cni.Result, *types100.Result, error) {
	n := f.record("ADD", req, att)
	if f.addHook != nil {
		if err := f.addHook(ctx, att); err != nil {
			return nil, nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if errs := f.addErrs[att.Name()]; len(errs) > 0 {
		f.addErrs[att.Name()] = errs[1:]
		if errs[0] != nil {
			return nil, nil, errs[0]
		}
	}
	ip := net.IPv4(198, 18, byte(n), 2) // a different address per call
	if err := f.cache(req, att, netns, ip); err != nil {
		return nil, nil, err
	}
	return &cni.Result{Interfaces: map[string]*cni.Config{att.IfName: {Sandbox: "/x", IPConfigs: []*cni.IPConfig{{IP: ip}}}}}, nil, nil
}

func (f *fakeDriver) AddPlugin(_ context.Context, req attachments.Request, att attachments.Attachment, _, typ string, _ types.Result) error {
	f.record("ADD "+typ, req, att)
	return nil
}

// cache writes libcni's cache file of the attachment, as libcni's ADD does.
func (f *fakeDriver) cache(req attachments.Request, att attachments.Attachment, netns string, ip net.IP) error {
	if f.cacheDir == "" {
		return nil
	}
	body, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": req.ID, "ifName": att.IfName, "networkName": att.Name(), "netns": netns,
		"config": att.Conf.Bytes, "cniArgs": req.Args, "capabilityArgs": map[string]any{"portMappings": req.Mappings},
		"result": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]string{{"address": ip.String() + "/24"}}}})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(f.cacheDir, "results"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(f.cachePath(req, att), body, 0o644)
}

func (f *fakeDriver) cachePath(req attachments.Request, att attachments.Attachment) string {
	return filepath.Join(f.cacheDir, "results", att.Name()+"-"+req.ID+"-"+att.IfName)
}

// byNetwork returns each network's calls, oldest first, as "VERB ifName".
func (f *fakeDriver) byNetwork() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for _, c := range f.calls {
		if out[c.network] != "" {
			out[c.network] += ", "
		}
		out[c.network] += c.verb + " " + c.ifName
	}
	return out
}

// sortedLog is log() sorted: concurrent networks' calls interleave freely.
func (f *fakeDriver) sortedLog() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := make([]string, len(f.calls))
	for i, c := range f.calls {
		s[i] = c.String()
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func (f *fakeDriver) Del(ctx context.Context, req attachments.Request, att attachments.Attachment, _ string, run footprint.PluginFilter) error {
	if run.Apart() { // portmap's DEL alone, for a whole workload: on no libcni cache
		f.record("DEL portmap", req, att)
		return nil
	}
	f.record("DEL", req, att)
	if f.delHook != nil {
		f.delHook(ctx, req.ID)
	}
	if f.cacheDir != "" {
		if err := os.Remove(f.cachePath(req, att)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

func (f *fakeDriver) Check(_ context.Context, req attachments.Request, att attachments.Attachment, _ string, _ []string) error {
	f.record("CHECK", req, att)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkErrs[att.Name()]
}

func (f *fakeDriver) RunsPlugins() bool { return false }

// find returns the first call of verb on network.
func (f *fakeDriver) find(verb, network string) driverCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c.verb == verb && c.network == network {
			return c
		}
	}
	return driverCall{}
}

func (f *fakeDriver) log() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := make([]string, len(f.calls))
	for i, c := range f.calls {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}
