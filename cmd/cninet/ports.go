package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/seed1280861d/cninet"
)

// portFlags collects -p host:container[/proto] flags.
type portFlags []cninet.Port

func (p *portFlags) String() string {
	var s []string
	for _, port := range *p {
		s = append(s, fmt.Sprintf("%d:%d", port.Value, port.To))
	}
	return strings.Join(s, ",")
}

func (p *portFlags) Set(v string) error {
	spec, proto, _ := strings.Cut(v, "/")
	host, ctr, ok := strings.Cut(spec, ":")
	if !ok {
		ctr = host
	}
	hp, err1 := strconv.Atoi(host)
	cp, err2 := strconv.Atoi(ctr)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("port mapping %q: want host:container[/tcp|/udp]", v)
	}
	if proto != "" && proto != "tcp" && proto != "udp" {
		return fmt.Errorf("port mapping %q: protocol must be tcp or udp", v)
	}
	*p = append(*p, cninet.Port{Label: v, Value: hp, To: cp, Protocol: proto})
	return nil
}

// networkList collects repeated --network flags, in order.
type networkList []string

func (n *networkList) String() string { return strings.Join(*n, ",") }

func (n *networkList) Set(v string) error {
	if v == "" {
		return fmt.Errorf("empty network name")
	}
	*n = append(*n, v)
	return nil
}
