package cninet_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/errs"
)

// sentinels are every exported sentinel; the contract in errors.go says
// each returned error wraps at least one.
var sentinels = []error{
	cninet.ErrInvalidAllocation, cninet.ErrInvalidArgument, cninet.ErrInvalidConfig, cninet.ErrNetworkNotFound,
	cninet.ErrPluginMissing, cninet.ErrSetupFailed, cninet.ErrNoAddress, cninet.ErrCheckFailed,
	cninet.ErrCheckUnsupported, cninet.ErrCleanupFailed, cninet.ErrIPTablesMissing, cninet.ErrNotReady,
	cninet.ErrClosed, cninet.ErrIO, cninet.ErrXtablesLock, cninet.ErrRecordUnreadable, cninet.ErrBusy,
	cninet.ErrAlreadyAttached, cninet.ErrNoNetNS, cninet.ErrNotRepairable,
}

// errPlugin stands for whatever a plugin or the host said.
var errPlugin = errors.New("plugin said no")

func TestEveryExportedFailureWrapsItsSentinelAndKeepsItsCause(t *testing.T) {
	conf := unitConfList(t)
	newC := func(t *testing.T, mutate func(*cninet.Config)) *cninet.Configurator {
		cfg := cninet.Config{ConfList: conf, CNI: &fakes.CNI{}, CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables, Retry: fastRetry,
			IPTables: func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil }}
		if mutate != nil {
			mutate(&cfg)
		}
		c, err := cninet.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	alloc := &cninet.Allocation{ID: "a"}
	aFile := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		call  func(t *testing.T) error
		want  error
		cause error // reachable through errors.Is, when the failure has one
	}{
		{"New without a network", func(t *testing.T) error {
			_, err := cninet.New(cninet.Config{CNI: &fakes.CNI{}})
			return err
		}, cninet.ErrInvalidConfig, nil},
		{"New with a ConfDir that does not exist", func(t *testing.T) error {
			_, err := cninet.New(cninet.Config{ConfDir: filepath.Join(t.TempDir(), "absent"), NetworkName: "n", CNI: &fakes.CNI{}})
			return err
		}, cninet.ErrInvalidConfig, fs.ErrNotExist},
		{"New with an unknown network", func(t *testing.T) error {
			_, err := cninet.New(cninet.Config{ConfDir: t.TempDir(), NetworkName: "n", CNI: &fakes.CNI{}})
			return err
		}, cninet.ErrNetworkNotFound, nil},
		{"New with a CacheDir go-cni would not use", func(t *testing.T) error {
			_, err := cninet.New(cninet.Config{ConfList: conf, CacheDir: t.TempDir(), StateDir: t.TempDir()})
			return err
		}, cninet.ErrInvalidConfig, nil},
		{"Setup of a nil allocation", func(t *testing.T) error {
			_, err := newC(t, nil).Setup(ctx, nil, "/x")
			return err
		}, cninet.ErrInvalidAllocation, nil},
		{"Setup without a namespace path", func(t *testing.T) error {
			_, err := newC(t, nil).Setup(ctx, alloc, "")
			return err
		}, cninet.ErrInvalidArgument, nil},
		{"Setup whose every ADD fails", func(t *testing.T) error {
			_, err := newC(t, func(c *cninet.Config) { c.CNI = &fakes.CNI{SetupErrs: []error{errPlugin, errPlugin, errPlugin}} }).Setup(ctx, alloc, "/x")
			return err
		}, cninet.ErrSetupFailed, errPlugin},
		{"Setup whose result has no address", func(t *testing.T) error {
			_, err := newC(t, func(c *cninet.Config) { c.CNI = &fakes.CNI{Result: &cni.Result{}} }).Setup(ctx, alloc, "/x")
			return err
		}, cninet.ErrNoAddress, nil},
		{"Setup when go-cni refuses the conflist", func(t *testing.T) error {
			_, err := newC(t, func(c *cninet.Config) { c.CNI = &fakes.CNI{LoadErr: errPlugin} }).Setup(ctx, alloc, "/x")
			return err
		}, cninet.ErrInvalidConfig, errPlugin},
		{"Setup after Close", func(t *testing.T) error {
			c := newC(t, nil)
			c.Close()
			_, err := c.Setup(ctx, alloc, "/x")
			return err
		}, cninet.ErrClosed, nil},
		{"Teardown of an invalid id", func(t *testing.T) error {
			return newC(t, nil).Teardown(ctx, &cninet.Allocation{ID: "-a"}, "")
		}, cninet.ErrInvalidAllocation, nil},
		{"Teardown without iptables", func(t *testing.T) error {
			return newC(t, func(c *cninet.Config) {
				c.IPTables = func(bool) (host.IPTables, error) { return nil, errPlugin }
			}).Teardown(ctx, alloc, "")
		}, cninet.ErrIPTablesMissing, errPlugin},
		{"Teardown whose cleanup fails", func(t *testing.T) error {
			ipt := fakes.NewIPTables()
			ipt.FailList["nat/"+chain("CNI-", "cninet-unit", "a")] = errPlugin
			return newC(t, func(c *cninet.Config) {
				c.IPTables = func(bool) (host.IPTables, error) { return ipt, nil }
			}).Teardown(ctx, alloc, "")
		}, cninet.ErrCleanupFailed, errPlugin},
		{"Teardown behind a held xtables lock", func(t *testing.T) error {
			return newC(t, func(c *cninet.Config) {
				c.IPTables = func(bool) (host.IPTables, error) {
					return &lockingIPTables{IPTables: fakes.NewIPTables(), held: true}, nil
				}
			}).Teardown(ctx, alloc, "")
		}, cninet.ErrXtablesLock, nil},
		{"Check without a namespace path", func(t *testing.T) error {
			return newC(t, nil).Check(ctx, alloc, "")
		}, cninet.ErrInvalidArgument, nil},
		{"Check of an unhealthy attachment", func(t *testing.T) error {
			return newC(t, func(c *cninet.Config) { c.CNI = &fakes.CNI{CheckErr: errPlugin} }).Check(ctx, alloc, "/x")
		}, cninet.ErrCheckFailed, errPlugin},
		{"GC with a nil live set", func(t *testing.T) error {
			_, err := newC(t, nil).GC(ctx, nil)
			return err
		}, cninet.ErrInvalidArgument, nil},
		{"GC whose sweep cannot list", func(t *testing.T) error {
			ipt := fakes.NewIPTables()
			ipt.FailList["nat/POSTROUTING"] = errPlugin
			_, err := newC(t, func(c *cninet.Config) {
				c.IPTables = func(bool) (host.IPTables, error) { return ipt, nil }
			}).GC(ctx, []string{})
			return err
		}, cninet.ErrCleanupFailed, errPlugin},
		{"Status with plugins missing", func(t *testing.T) error {
			return newC(t, func(c *cninet.Config) { c.PluginDirs = []string{t.TempDir()} }).Status(ctx)
		}, cninet.ErrPluginMissing, nil},
		{"Status when CNI STATUS fails", func(t *testing.T) error {
			return newC(t, func(c *cninet.Config) {
				c.CNI, c.PluginDirs = &fakes.CNI{StatusErr: errPlugin}, []string{specPlugins(t, `"0.4.0","1.0.0"`, "loopback", "bridge", "firewall", "portmap")}
			}).Status(ctx)
		}, cninet.ErrNotReady, errPlugin},
		{"Reload without a ConfDir", func(t *testing.T) error {
			return newC(t, nil).Reload()
		}, cninet.ErrInvalidConfig, nil},
		{"LoadConfList of a directory that does not exist", func(t *testing.T) error {
			_, err := cninet.LoadConfList(filepath.Join(t.TempDir(), "absent"), "n")
			return err
		}, cninet.ErrInvalidConfig, fs.ErrNotExist},
		{"LoadConfList of an unknown network", func(t *testing.T) error {
			_, err := cninet.LoadConfList(t.TempDir(), "n")
			return err
		}, cninet.ErrNetworkNotFound, nil},
		{"BridgeConfList of a bad subnet", func(t *testing.T) error {
			_, err := cninet.BridgeConfList(cninet.BridgeConfig{IPv4Subnet: "198.18.0.1/24"})
			return err
		}, cninet.ErrInvalidConfig, nil},
		{"WriteConfList of an invalid conflist", func(t *testing.T) error {
			_, err := cninet.WriteConfList(t.TempDir(), []byte("{"))
			return err
		}, cninet.ErrInvalidConfig, nil},
		{"WriteConfList into a file", func(t *testing.T) error {
			_, err := cninet.WriteConfList(filepath.Join(aFile, "dir"), conf)
			return err
		}, cninet.ErrIO, syscall.ENOTDIR},
		{"PortMappings of a port out of range", func(t *testing.T) error {
			_, err := cninet.PortMappings(&cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 70000}}}, false)
			return err
		}, cninet.ErrInvalidAllocation, nil},
		{"StatusFromResult of nil", func(t *testing.T) error {
			_, err := cninet.StatusFromResult(nil)
			return err
		}, cninet.ErrNoAddress, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(t)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Fatalf("err = %v: its cause %v is not reachable with errors.Is", err, tc.cause)
			}
			if strings.TrimSpace(err.Error()) == tc.want.Error() {
				t.Fatalf("err = %q says only the sentinel, not what was wrong", err)
			}
			wraps := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					wraps++
				}
			}
			if wraps == 0 {
				t.Fatalf("err = %v wraps no sentinel", err)
			}
		})
	}
}

// An error of an internal package wraps an errs kind: errors.Is matches
// it against the sentinel cninet exports for that kind, whose text it
// has, and against no other sentinel.
func TestEveryInternalErrorKindIsAnExportedSentinel(t *testing.T) {
	for _, kind := range errs.All {
		t.Run(kind.Error(), func(t *testing.T) {
			err := fmt.Errorf("context: %w", kind)
			var matched []error
			for _, s := range sentinels {
				if errors.Is(err, s) {
					matched = append(matched, s)
				}
			}
			if len(matched) != 1 || matched[0].Error() != kind.Error() {
				t.Fatalf("an error wrapping kind %q matches the sentinels %v: want exactly the exported one with its text", kind.Error(), matched)
			}
		})
	}
}
