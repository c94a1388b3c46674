package main

import (
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/rayito/rayito-agent/internal/netconf"
)

// ifaceWait bounds how long the init waits for the network device: the
// driver may still be probing when PID 1 starts.
const ifaceWait = 10 * time.Second

var errNoIface = errors.New("network interface did not appear")

// configureNetwork brings up lo and the configured interface with its
// address and default route.
func configureNetwork(nc netConfig, log *zap.Logger) error {
	c, err := netconf.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	if err := c.SetLinkUp(lo.Index); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	if nc.Disabled {
		log.Info("network left alone (rayito.net=off)")
		return nil
	}
	ifc, err := waitIface(nc.Iface, ifaceWait)
	if err != nil {
		return err
	}
	if err := c.ReplaceAddr(ifc.Index, nc.Addr); err != nil {
		return fmt.Errorf("%s address %s: %w", nc.Iface, nc.Addr, err)
	}
	if err := c.SetLinkUp(ifc.Index); err != nil {
		return fmt.Errorf("%s up: %w", nc.Iface, err)
	}
	if nc.Gateway.IsValid() {
		if err := c.ReplaceDefaultRoute(ifc.Index, nc.Gateway); err != nil {
			return fmt.Errorf("default route via %s: %w", nc.Gateway, err)
		}
	}
	log.Info("network up", zap.String("iface", nc.Iface), zap.Stringer("addr", nc.Addr), zap.Stringer("gateway", nc.Gateway))
	return nil
}

func waitIface(name string, limit time.Duration) (*net.Interface, error) {
	deadline := time.Now().Add(limit)
	for {
		ifc, err := net.InterfaceByName(name)
		if err == nil {
			return ifc, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: %w", name, errNoIface)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
