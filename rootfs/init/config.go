package main

import (
	"net/netip"
	"strings"
)

// Defaults match QEMU's user-mode network and the image layout.
const (
	defaultAgent    = "/usr/local/bin/rayito-agent"
	defaultEnvFile  = "/etc/rayito-agent.env"
	defaultHostname = "rayito"
	defaultIface    = "eth0"
)

var (
	defaultAddr    = netip.MustParsePrefix("10.0.2.15/24")
	defaultGateway = netip.MustParseAddr("10.0.2.2")
)

// haltMode is what the init asks the kernel for when it shuts down.
type haltMode int

const (
	haltPowerOff haltMode = iota // QEMU exits on ACPI power off
	haltReboot                   // Firecracker exits when the guest reboots
)

// netConfig is the guest's single IPv4 interface.
type netConfig struct {
	Disabled bool
	Iface    string
	Addr     netip.Prefix
	Gateway  netip.Addr // invalid: no default route
}

// config is what the init takes from the kernel command line.
type config struct {
	Agent    string
	EnvFile  string
	Hostname string // empty: from /etc/hostname
	Halt     haltMode
	Net      netConfig
	// Problems are parameters that were ignored, to be logged.
	Problems []string
}

// parseCmdline reads the rayito.* parameters from the kernel command line;
// anything it does not know is left to the kernel.
//
//	rayito.agent=PATH      program to run and supervise
//	rayito.env=PATH        environment file for the agent
//	rayito.hostname=NAME   hostname (default: /etc/hostname, else "rayito")
//	rayito.net=off         leave the network alone
//	rayito.iface=NAME      interface to configure (default eth0)
//	rayito.ip=ADDR/LEN     its address (default 10.0.2.15/24)
//	rayito.gw=ADDR|none    default gateway (default 10.0.2.2)
//	rayito.halt=reboot     reboot instead of power off on shutdown
func parseCmdline(cmdline string) config {
	cfg := config{
		Agent:   defaultAgent,
		EnvFile: defaultEnvFile,
		Net:     netConfig{Iface: defaultIface, Addr: defaultAddr, Gateway: defaultGateway},
	}
	for _, field := range strings.Fields(cmdline) {
		key, value, _ := strings.Cut(field, "=")
		switch key {
		case "rayito.agent":
			cfg.Agent = value
		case "rayito.env":
			cfg.EnvFile = value
		case "rayito.hostname":
			cfg.Hostname = value
		case "rayito.net":
			cfg.Net.Disabled = value == "off"
		case "rayito.iface":
			cfg.Net.Iface = value
		case "rayito.ip":
			p, err := netip.ParsePrefix(value)
			if err != nil || !p.Addr().Is4() {
				cfg.Problems = append(cfg.Problems, field)
				continue
			}
			cfg.Net.Addr = p
		case "rayito.gw":
			if value == "none" {
				cfg.Net.Gateway = netip.Addr{}
				continue
			}
			a, err := netip.ParseAddr(value)
			if err != nil || !a.Is4() {
				cfg.Problems = append(cfg.Problems, field)
				continue
			}
			cfg.Net.Gateway = a
		case "rayito.halt":
			switch value {
			case "reboot":
				cfg.Halt = haltReboot
			case "poweroff":
				cfg.Halt = haltPowerOff
			default:
				cfg.Problems = append(cfg.Problems, field)
			}
		}
	}
	return cfg
}
