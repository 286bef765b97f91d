package fakecni

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	cni "github.com/containerd/go-cni"
)

// Call is one recorded call.
type Call struct {
	Verb         string // "Setup", "Remove", "Check", "Load", "Status"
	ID, NetNS    string
	PortMappings []cni.PortMapping
	Args         map[string]string
}

// CNI is a fake cni.CNI. Zero value: not initialised until Load; Setup
// returns Result (or a one-interface default); nothing fails.
type CNI struct {
	mu    sync.Mutex
	calls []Call

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

	loaded bool
}

// DefaultResult is a bridge-like result: a host-side veth, the bridge, and
// eth0 in the sandbox with 198.18.0.2.
func DefaultResult() *cni.Result {
	return &cni.Result{Interfaces: map[string]*cni.Config{
		"eth0": {Sandbox: "/var/run/netns/x", IPConfigs: []*cni.IPConfig{{IP: []byte{198, 18, 0, 2}}}},
	}}
}

func (f *CNI) record(verb, id, netns string, opts []cni.NamespaceOpts) error {
	c := Call{Verb: verb, ID: id, NetNS: netns}
	if len(opts) > 0 {
		var err error
		if c.PortMappings, c.Args, err = DecodeOpts(opts); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	return nil
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

// Setup implements cni.CNI.
func (f *CNI) Setup(ctx context.Context, id, path string, opts ...cni.NamespaceOpts) (*cni.Result, error) {
	if err := f.record("Setup", id, path, opts); err != nil {
		return nil, err
	}
	if f.SetupHook != nil {
		if err := f.SetupHook(ctx, id); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	var err error
	if len(f.SetupErrs) > 0 {
		err, f.SetupErrs = f.SetupErrs[0], f.SetupErrs[1:]
	}
	res := f.Result
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if res == nil {
		res = DefaultResult()
	}
	return res, nil
}

// SetupSerially implements cni.CNI.
func (f *CNI) SetupSerially(ctx context.Context, id, path string, opts ...cni.NamespaceOpts) (*cni.Result, error) {
	return f.Setup(ctx, id, path, opts...)
}

// Remove implements cni.CNI.
func (f *CNI) Remove(ctx context.Context, id, path string, opts ...cni.NamespaceOpts) error {
	if err := f.record("Remove", id, path, opts); err != nil {
		return err
	}
	if f.RemoveHook != nil {
		if err := f.RemoveHook(ctx, id); err != nil {
			return err
		}
	}
	return f.RemoveErr
}

// Check implements cni.CNI.
func (f *CNI) Check(ctx context.Context, id, path string, opts ...cni.NamespaceOpts) error {
	if err := f.record("Check", id, path, opts); err != nil {
		return err
	}
	return f.CheckErr
}

// Load implements cni.CNI; the options are applied to nothing.
func (f *CNI) Load(opts ...cni.Opt) error {
	f.record("Load", "", "", nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.LoadErr != nil {
		return f.LoadErr
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
		return nil, nil, errors.New("fakecni: go-cni Namespace layout changed")
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
