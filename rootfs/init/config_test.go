package main

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	defaults := parseCmdline("")
	for _, tc := range []struct {
		name    string
		cmdline string
		edit    func(*config)
	}{
		{"kernel params only", "console=ttyS0 root=/dev/vda rw panic=-1 init=/sbin/init", func(*config) {}},
		{"agent and env", "rayito.agent=/opt/a rayito.env=/etc/a.env", func(c *config) {
			c.Agent, c.EnvFile = "/opt/a", "/etc/a.env"
		}},
		{"hostname", "quiet rayito.hostname=box-7", func(c *config) { c.Hostname = "box-7" }},
		{"firecracker style network", "rayito.iface=eth1 rayito.ip=172.16.0.2/30 rayito.gw=172.16.0.1", func(c *config) {
			c.Net.Iface = "eth1"
			c.Net.Addr = netip.MustParsePrefix("172.16.0.2/30")
			c.Net.Gateway = netip.MustParseAddr("172.16.0.1")
		}},
		{"no gateway", "rayito.gw=none", func(c *config) { c.Net.Gateway = netip.Addr{} }},
		{"network off", "rayito.net=off", func(c *config) { c.Net.Disabled = true }},
		{"reboot to halt", "rayito.halt=reboot", func(c *config) { c.Halt = haltReboot }},
		{"bad values are reported and ignored", "rayito.ip=10.0.2.300/24 rayito.gw=::1 rayito.halt=explode", func(c *config) {
			c.Problems = []string{"rayito.ip=10.0.2.300/24", "rayito.gw=::1", "rayito.halt=explode"}
		}},
		{"ipv6 address refused", "rayito.ip=fd00::2/64", func(c *config) { c.Problems = []string{"rayito.ip=fd00::2/64"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := defaults
			tc.edit(&want)
			got := parseCmdline(tc.cmdline)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("parseCmdline(%q)\n got %+v\nwant %+v", tc.cmdline, got, want)
			}
		})
	}
}

func TestCmdlineDefaultsAreQEMUUserNetworking(t *testing.T) {
	c := parseCmdline("")
	if c.Net.Iface != "eth0" || c.Net.Addr.String() != "10.0.2.15/24" || c.Net.Gateway.String() != "10.0.2.2" || c.Net.Disabled {
		t.Errorf("defaults %+v", c.Net)
	}
	if c.Agent != "/usr/local/bin/rayito-agent" || c.EnvFile != "/etc/rayito-agent.env" || c.Halt != haltPowerOff {
		t.Errorf("defaults %+v", c)
	}
}
