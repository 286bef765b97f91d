package thick

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet"
)

// check is CHECK. The runtime's prevResult, when it sent one, must
// describe the attachment as the delegate's own cached result does (the
// same addresses, and each interface it names with the same MAC and
// sandbox): a runtime that remembers something else is told the
// attachment is unhealthy, as a plugin would tell it. Then the delegate's
// CHECK runs, on its cached result. A CHECK cninet cannot perform
// (ErrCheckUnsupported) is no verdict on the attachment, so it passes.
func check(ctx context.Context, c Configurator, req *Request, conf *NetConf) error {
	alloc, err := Allocation(req, conf)
	if err != nil {
		return err
	}
	if len(conf.PrevResult) > 0 {
		cached, err := c.CachedResult(req.ContainerID, conf.Name, req.IfName)
		if err != nil {
			return fmt.Errorf("%w: allocation %s in network %q as %s: %w", cninet.ErrCheckFailed, req.ContainerID, conf.Name, req.IfName, err)
		}
		if cached != nil { // else Check says the attachment is not there
			if err := samePrevResult(conf.PrevResult, conf.CNIVersion, cached); err != nil {
				return fmt.Errorf("%w: allocation %s in network %q as %s: %w", cninet.ErrCheckFailed, req.ContainerID, conf.Name, req.IfName, err)
			}
		}
	}
	err = c.Check(ctx, alloc, req.NetNS, cninet.CheckOptions{Network: conf.Name, IfName: req.IfName})
	if errors.Is(err, cninet.ErrCheckUnsupported) && !errors.Is(err, cninet.ErrCheckFailed) {
		return nil
	}
	return err
}

// errPrevResult marks a prevResult that does not describe the attachment.
var errPrevResult = errors.New("the runtime's prevResult does not match the attachment")

// samePrevResult compares the runtime's prevResult (of confVersion when
// it names no cniVersion) with the delegate's cached result: the same set
// of addresses, and every interface the prevResult names present with
// the MAC and sandbox it names. A prevResult that cannot be read is an
// ErrBadRequest error.
func samePrevResult(raw json.RawMessage, confVersion string, cached types.Result) error {
	prev, err := asCurrent(raw, confVersion)
	if err != nil {
		return fmt.Errorf("%w: prevResult: %w", ErrBadRequest, err)
	}
	have, err := types100.NewResultFromResult(cached)
	if err != nil {
		return fmt.Errorf("reading the delegate's cached result: %w", err)
	}
	if want, got := addresses(prev), addresses(have); !slices.Equal(want, got) {
		return fmt.Errorf("%w: it names addresses [%s], the delegate's result [%s]", errPrevResult, strings.Join(want, " "), strings.Join(got, " "))
	}
	for _, pi := range prev.Interfaces {
		if pi == nil {
			continue
		}
		i := slices.IndexFunc(have.Interfaces, func(hi *types100.Interface) bool { return hi != nil && hi.Name == pi.Name })
		if i < 0 {
			return fmt.Errorf("%w: it names interface %q, which the delegate's result does not", errPrevResult, pi.Name)
		}
		hi := have.Interfaces[i]
		if pi.Mac != "" && !strings.EqualFold(pi.Mac, hi.Mac) || pi.Sandbox != "" && pi.Sandbox != hi.Sandbox {
			return fmt.Errorf("%w: interface %q has MAC %q in sandbox %q, the delegate's result MAC %q in sandbox %q",
				errPrevResult, pi.Name, pi.Mac, pi.Sandbox, hi.Mac, hi.Sandbox)
		}
	}
	return nil
}

// asCurrent reads a result of its own cniVersion (else fallback) as a
// current (1.x) result.
func asCurrent(raw json.RawMessage, fallback string) (*types100.Result, error) {
	var head struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%w: not a result object: %w", errMalformed, err)
	}
	v := head.CNIVersion
	if v == "" {
		v = fallback
	}
	res, err := version.NewResult(v, raw)
	if err != nil {
		return nil, fmt.Errorf("reading a %s result: %w", v, err)
	}
	return types100.NewResultFromResult(res)
}

// addresses are a result's addresses (CIDR notation), sorted.
func addresses(r *types100.Result) []string {
	var out []string
	for _, ip := range r.IPs {
		if ip != nil {
			out = append(out, ip.Address.String())
		}
	}
	slices.Sort(out)
	return out
}
