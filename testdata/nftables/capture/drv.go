//go:build ignore

// drv is cnitool with CNI_CONTAINERID and CNI_IFNAME taken from the
// environment (cnitool v1.3.0 derives the id from the netns path).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: drv add|del|check NET NETNS")
		os.Exit(2)
	}
	netconf, err := libcni.LoadNetworkConf(os.Getenv("NETCONFPATH"), os.Args[2])
	if err != nil {
		fail(err)
	}
	var capArgs map[string]interface{}
	if v := os.Getenv("CAP_ARGS"); v != "" {
		if err := json.Unmarshal([]byte(v), &capArgs); err != nil {
			fail(err)
		}
	}
	ifName := os.Getenv("CNI_IFNAME")
	if ifName == "" {
		ifName = "eth0"
	}
	id := os.Getenv("CNI_CONTAINERID")
	if id == "" {
		fail(fmt.Errorf("CNI_CONTAINERID required"))
	}
	c := libcni.NewCNIConfig(filepath.SplitList(os.Getenv("CNI_PATH")), nil)
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: os.Args[3], IfName: ifName, CapabilityArgs: capArgs}
	switch os.Args[1] {
	case "add":
		res, err := c.AddNetworkList(context.TODO(), netconf, rt)
		if res != nil {
			_ = res.Print()
		}
		fail(err)
	case "del":
		fail(c.DelNetworkList(context.TODO(), netconf, rt))
	case "check":
		fail(c.CheckNetworkList(context.TODO(), netconf, rt))
	}
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "ERROR:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
