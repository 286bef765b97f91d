package fakes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"sync"
	"unsafe"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/pkg/types"
)

// Call is one recorded call.
type Call struct {
	Verb         string // "Setup", "Remove", "Check", "Load", "Status"
	ID, NetNS    string
	PortMappings []cni.PortMapping
	Args         map[string]string
}

// CNI is a fake go-cni cni.CNI, for Config.CNI. The zero value is not
// initialised until Load, returns DefaultResult from every Setup, fails
// nothing and changes nothing: it records calls and fails as scripted.
//
// With Host set it also acts as the loaded conflist's plugins would on
// that host: Setup hands out addresses as host-local does (from .2 of
// each range on, reserved in the range's dataDir, or in memory when the
// conflist names none) and writes the iptables rules of bridge's ipMasq,
// portmap and firewall (see Footprint); Remove takes them back, unless
// LeakOnRemove. With CacheDir set, Setup caches each result there as
// libcni does and Remove deletes it.
type CNI struct {
	mu    sync.Mutex
	calls []Call

	// Host, when set before the first Load, is where Setup and Remove act
	// as the plugins.
	Host *Host
	// CacheDir, when set, is libcni's cache directory: Config.CacheDir.
	CacheDir string
	// LeakOnRemove makes Remove leave the host, reservations and cache as
	// they are, as a DEL does that lost its cached result or was killed:
	// what Setup wrote is then for Teardown's cleanup to find.
	LeakOnRemove bool

	// Result is returned by every successful Setup; nil means DefaultResult.
	Result *cni.Result
	// SetupErrs are returned by successive Setup calls (nil entries succeed);
	// once exhausted, Setup succeeds.
	SetupErrs []error
	// SetupHook, if set, runs inside Setup before the scripted outcome; a
	// non-nil error it returns is returned instead.
	SetupHook func(ctx context.Context, id string) error
	// RemoveHook, if set, runs inside Remove (say, to do what a plugin's
	// DEL does to the host); a non-nil error it returns is returned.
	RemoveHook func(ctx context.Context, id string) error
	// RemoveErr, CheckErr and StatusErr are returned by every call of that verb.
	RemoveErr, CheckErr, StatusErr error
	// LoadErr is returned by Load.
	LoadErr error

	loaded   bool
	net      *network               // the loaded conflist, as the plugins read it
	memory   map[netip.Addr]string  // reservations without a dataDir: address -> id
	attached map[string][]Footprint // what Setup wrote per id
}

// DefaultResult is the result of Setup without Host: eth0 in the sandbox
// with 198.18.0.2.
func DefaultResult() *cni.Result {
	return &cni.Result{Interfaces: map[string]*cni.Config{
		"eth0": {Sandbox: "/var/run/netns/x", IPConfigs: []*cni.IPConfig{{IP: []byte{198, 18, 0, 2}}}},
	}}
}

func (f *CNI) record(verb, id, netns string, opts []cni.NamespaceOpts) (Call, error) {
	c := Call{Verb: verb, ID: id, NetNS: netns}
	if len(opts) > 0 {
		var err error
		if c.PortMappings, c.Args, err = DecodeOpts(opts); err != nil {
			return c, err
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	return c, nil
}

// Calls returns the recorded calls, oldest first.
func (f *CNI) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...)
}

// Verbs returns the verbs of the recorded calls, oldest first.
func (f *CNI) Verbs() []string {
	var v []string
	for _, c := range f.Calls() {
		v = append(v, c.Verb)
	}
	return v
}

// Setup implements cni.CNI: the scripted outcome, then, with Host set,
// the plugins' ADD (unless Result is set, which is returned as it is).
func (f *CNI) Setup(ctx context.Context, id, path string, opts ...cni.NamespaceOpts) (*cni.Result, error) {
	call, err := f.record("Setup", id, path, opts)
	if err != nil {
		return nil, err
	}
	if f.SetupHook != nil {
		if err := f.SetupHook(ctx, id); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.SetupErrs) > 0 {
		err, f.SetupErrs = f.SetupErrs[0], f.SetupErrs[1:]
	}
	if err != nil {
		return nil, err
	}
	switch {
	case f.Result != nil:
		return f.Result, nil
	case f.Host != nil && f.net != nil:
		return f.add(call)
	}
	return DefaultResult(), nil
}

// add is the plugins' ADD: addresses, rules, cache. Called with f.mu held.
func (f *CNI) add(call Call) (*cni.Result, error) {
	n := f.net
	addrs, err := f.reserve(n, call.ID)
	if err != nil {
		return nil, err
	}
	if f.attached == nil {
		f.attached = map[string][]Footprint{}
	}
	for _, fp := range n.footprints(call.ID, addrs, call.PortMappings) {
		f.Host.plant(fp)
		f.attached[call.ID] = append(f.attached[call.ID], fp)
	}
	f.Host.plug(n.bridge, call.NetNS, n.ifName, addrs)
	if f.CacheDir != "" {
		if err := f.cache(n, call, addrs); err != nil {
			return nil, err
		}
	}
	return result(n.ifName, call.NetNS, addrs), nil
}

// del is the plugins' DEL of id in the namespace at netns. Called with
// f.mu held.
func (f *CNI) del(id, netns string) error {
	n := f.net
	if n == nil || f.LeakOnRemove {
		return nil
	}
	if f.Host != nil {
		var addrs []netip.Prefix
		for _, fp := range f.attached[id] {
			f.Host.uproot(fp)
			addrs = append(addrs, fp.Addr)
		}
		f.Host.unplug(netns, n.ifName, addrs)
		delete(f.attached, id)
		if err := f.release(n, id); err != nil {
			return err
		}
	}
	if f.CacheDir != "" {
		if err := os.Remove(f.cachePath(n, id)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// Footprints returns what Setup wrote on Host for id and Remove has not
// taken back: one Footprint per address.
func (f *CNI) Footprints(id string) []Footprint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Footprint(nil), f.attached[id]...)
}

// AddPlugin implements cninet.PluginAdder: with Host set, the ADD of the
// loaded conflist's plugin of type pluginType alone for id, as a repair
// runs it. portmap and firewall write what of their rules is missing
// (both add a rule only where it is not there); any other plugin is
// refused, as its ADD alone would make a second interface. prevResult
// is not read: the fake knows what it handed out.
func (f *CNI) AddPlugin(_ context.Context, id, netns, pluginType string, _ types.Result, opts ...cni.NamespaceOpts) error {
	if _, err := f.record("AddPlugin "+pluginType, id, netns, opts); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Host == nil || f.net == nil {
		return fmt.Errorf("fake CNI: %s's ADD alone: no Host to act on", pluginType)
	}
	if len(f.attached[id]) == 0 {
		return fmt.Errorf("fake CNI: %s's ADD alone: %s is not attached", pluginType, id)
	}
	for _, fp := range f.attached[id] {
		ipt := f.Host.Family(fp.IPv6())
		switch pluginType {
		case "portmap":
			if len(fp.Ports) > 0 {
				ipt.Ensure("nat", SharedNAT)
				ipt.Ensure("nat", Footprint{Network: fp.Network, ID: fp.ID, Addr: fp.Addr, Ports: fp.Ports}.NAT())
			}
		case "firewall":
			if fp.Firewall {
				ipt.Ensure("filter", SharedFilter(fp.AdminChain))
				ipt.Ensure("filter", fp.Filter())
			}
		default:
			return fmt.Errorf("fake CNI: %s's ADD cannot run alone", pluginType)
		}
	}
	return nil
}

// SetupSerially implements cni.CNI.
func (f *CNI) SetupSerially(ctx context.Context, id, path string, opts ...cni.NamespaceOpts) (*cni.Result, error) {
	return f.Setup(ctx, id, path, opts...)
}

// Remove implements cni.CNI: RemoveHook, then RemoveErr if set, else,
// with Host or CacheDir set, the plugins' DEL.
func (f *CNI) Remove(ctx context.Context, id, path string, opts ...cni.NamespaceOpts) error {
	if _, err := f.record("Remove", id, path, opts); err != nil {
		return err
	}
	if f.RemoveHook != nil {
		if err := f.RemoveHook(ctx, id); err != nil {
			return err
		}
	}
	if f.RemoveErr != nil {
		return f.RemoveErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.del(id, path)
}

// Check implements cni.CNI.
func (f *CNI) Check(ctx context.Context, id, path string, opts ...cni.NamespaceOpts) error {
	if _, err := f.record("Check", id, path, opts); err != nil {
		return err
	}
	return f.CheckErr
}

// Load implements cni.CNI: the options are parsed by a go-cni of the
// fake's own, which runs nothing, and the first network's conflist is
// what the emulated plugins read.
func (f *CNI) Load(opts ...cni.Opt) error {
	f.record("Load", "", "", nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.LoadErr != nil {
		return f.LoadErr
	}
	if f.Host != nil || f.CacheDir != "" { // only the emulated plugins read the conflist
		n, err := decodeNetwork(opts)
		if err != nil {
			return err
		}
		f.net = n
	}
	f.loaded = true
	return nil
}

// Status implements cni.CNI: ErrCNINotInitialized until Load succeeded.
func (f *CNI) Status() error {
	f.record("Status", "", "", nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.loaded {
		return fmt.Errorf("fake: %w", cni.ErrCNINotInitialized)
	}
	return f.StatusErr
}

// GetConfig implements cni.CNI.
func (f *CNI) GetConfig() *cni.ConfigResult { return &cni.ConfigResult{} }

// DecodeOpts applies go-cni namespace options to an empty namespace and
// returns the port mappings and args they set. go-cni keeps both in
// unexported fields, so they are read by reflection.
func DecodeOpts(opts []cni.NamespaceOpts) ([]cni.PortMapping, map[string]string, error) {
	ns := &cni.Namespace{}
	v := reflect.ValueOf(ns).Elem()
	caps := field(v, "capabilityArgs")
	args := field(v, "args")
	if !caps.IsValid() || !args.IsValid() {
		return nil, nil, errors.New("fake CNI: go-cni Namespace layout changed")
	}
	caps.Set(reflect.ValueOf(map[string]interface{}{}))
	args.Set(reflect.ValueOf(map[string]string{}))
	for _, o := range opts {
		if err := o(ns); err != nil {
			return nil, nil, err
		}
	}
	capMap := caps.Interface().(map[string]interface{})
	pm, _ := capMap["portMappings"].([]cni.PortMapping)
	return pm, args.Interface().(map[string]string), nil
}

func field(v reflect.Value, name string) reflect.Value {
	f := v.FieldByName(name)
	if !f.IsValid() {
		return f
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}
