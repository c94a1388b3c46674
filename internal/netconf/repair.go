package netconf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// After a resume the guest's network may be wrong in two ways: its
// neighbours (the gateway's MAC address) are remembered from before the
// snapshot, and the network around it (a clone on another host, another
// address) forgot it. Repair forgets the neighbours and announces the
// guest's addresses (gratuitous ARP) so the gateway learns them again;
// Apply takes new facts from the host.

// Facts is what a host may tell the guest about its network at a resume.
// Zero fields are left as they are.
type Facts struct {
	// Interface names the link; "" is the one with the default route,
	// else the only one that is up and not loopback.
	Interface string
	Address   netip.Prefix // IPv4, such as 10.0.2.15/24
	Gateway   netip.Addr   // IPv4
	DNS       []netip.Addr // at most 3: what resolv.conf takes
}

// MaxDNS is how many name servers resolv.conf takes.
const MaxDNS = 3

// ParseFacts reads the host's strings; an error names the field.
func ParseFacts(iface, address, gateway string, dns []string) (Facts, error) {
	f := Facts{Interface: iface}
	if iface != "" && (len(iface) >= unix.IFNAMSIZ || strings.ContainsAny(iface, "/ \x00")) {
		return f, fmt.Errorf("network.interface %q is not an interface name", iface)
	}
	if address != "" {
		p, err := netip.ParsePrefix(address)
		if err != nil || !p.Addr().Is4() || p.Bits() < 1 {
			return f, fmt.Errorf("network.address must be an IPv4 address with its prefix length, such as 10.0.2.15/24, got %q", address)
		}
		f.Address = p
	}
	if gateway != "" {
		a, err := netip.ParseAddr(gateway)
		if err != nil || !a.Is4() {
			return f, fmt.Errorf("network.gateway must be an IPv4 address, got %q", gateway)
		}
		if f.Address.IsValid() && !f.Address.Masked().Contains(a) {
			return f, fmt.Errorf("network.gateway %s is not in network.address's network %s", a, f.Address.Masked())
		}
		f.Gateway = a
	}
	if len(dns) > MaxDNS {
		return f, fmt.Errorf("network.dns takes at most %d servers, got %d", MaxDNS, len(dns))
	}
	for _, d := range dns {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return f, fmt.Errorf("network.dns: %q is not an IP address", d)
		}
		f.DNS = append(f.DNS, a)
	}
	return f, nil
}

// Empty reports whether f changes nothing.
func (f Facts) Empty() bool {
	return !f.Address.IsValid() && !f.Gateway.IsValid() && f.DNS == nil
}

// Report is what Repair and Apply did, for last_resume.
type Report struct {
	Interface         string   `json:"interface,omitempty"`
	NeighboursFlushed int      `json:"neighbours_flushed"`
	Announced         []string `json:"announced,omitempty"`
	Changed           []string `json:"changed,omitempty"`
	Error             string   `json:"error,omitempty"`
}

// ResolvConf is where Apply writes the name servers.
var ResolvConf = "/etc/resolv.conf"

// Repair applies f (when it is not empty), then forgets the link's
// neighbours and announces its IPv4 addresses.
func Repair(f Facts) Report {
	var r Report
	var errs []error
	ifc, err := pickInterface(f.Interface)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Interface = ifc.Name
	c, err := Dial()
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer c.Close()
	if !f.Empty() {
		changed, err := apply(c, ifc, f)
		r.Changed = changed
		if err != nil {
			errs = append(errs, err)
		}
	}
	n, err := c.FlushNeighbours(ifc.Index)
	r.NeighboursFlushed = n
	if err != nil {
		errs = append(errs, fmt.Errorf("flushing neighbours: %w", err))
	}
	for _, a := range ipv4Addrs(ifc) {
		if err := announce(ifc, a); err != nil {
			errs = append(errs, fmt.Errorf("announcing %s: %w", a, err))
			continue
		}
		r.Announced = append(r.Announced, a.String())
	}
	if err := errors.Join(errs...); err != nil {
		r.Error = err.Error()
	}
	return r
}

// apply sets what f names and says what changed.
func apply(c *RTNL, ifc *net.Interface, f Facts) ([]string, error) {
	var changed []string
	if f.Address.IsValid() {
		had := ipv4Prefixes(ifc)
		if len(had) != 1 || had[0] != f.Address {
			if err := c.ReplaceAddr(ifc.Index, f.Address); err != nil {
				return changed, fmt.Errorf("setting address %s: %w", f.Address, err)
			}
			for _, p := range had {
				if p != f.Address {
					if err := c.DeleteAddr(ifc.Index, p); err != nil {
						return changed, fmt.Errorf("removing address %s: %w", p, err)
					}
				}
			}
			changed = append(changed, fmt.Sprintf("address %v to %s", had, f.Address))
		}
	}
	if f.Gateway.IsValid() {
		if err := c.ReplaceDefaultRoute(ifc.Index, f.Gateway); err != nil {
			return changed, fmt.Errorf("setting gateway %s: %w", f.Gateway, err)
		}
		changed = append(changed, "default route via "+f.Gateway.String())
	}
	if f.DNS != nil {
		did, err := writeResolvConf(f.DNS)
		if err != nil {
			return changed, err
		}
		if did {
			changed = append(changed, "name servers "+fmt.Sprint(f.DNS))
		}
	}
	return changed, nil
}

// writeResolvConf replaces the nameserver lines of resolv.conf, keeping
// the rest; false if they were those already.
func writeResolvConf(dns []netip.Addr) (bool, error) {
	old, err := os.ReadFile(ResolvConf)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	var keep []string
	for _, line := range strings.Split(string(old), "\n") {
		if line != "" && !strings.HasPrefix(strings.TrimSpace(line), "nameserver") {
			keep = append(keep, line)
		}
	}
	for _, d := range dns {
		keep = append(keep, "nameserver "+d.String())
	}
	b := []byte(strings.Join(keep, "\n") + "\n")
	if string(b) == string(old) {
		return false, nil
	}
	tmp := filepath.Join(filepath.Dir(ResolvConf), ".resolv.conf.rayito")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return false, fmt.Errorf("writing %s: %w", ResolvConf, err)
	}
	if err := os.Rename(tmp, ResolvConf); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("writing %s: %w", ResolvConf, err)
	}
	return true, nil
}

// pickInterface is the named link, or the one the guest talks through.
func pickInterface(name string) (*net.Interface, error) {
	if name != "" {
		ifc, err := net.InterfaceByName(name)
		if err != nil {
			return nil, fmt.Errorf("network.interface %s: %w", name, err)
		}
		return ifc, nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var up []net.Interface
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagLoopback == 0 && len(ipv4Addrs(&ifc)) > 0 {
			up = append(up, ifc)
		}
	}
	if len(up) != 1 {
		return nil, fmt.Errorf("%d interfaces are up with an IPv4 address: name one (network.interface)", len(up))
	}
	return &up[0], nil
}

func ipv4Prefixes(ifc *net.Interface) []netip.Prefix {
	addrs, _ := ifc.Addrs()
	var out []netip.Prefix
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && n.IP.To4() != nil {
				ones, _ := n.Mask.Size()
				out = append(out, netip.PrefixFrom(ip, ones))
			}
		}
	}
	return out
}

func ipv4Addrs(ifc *net.Interface) []netip.Addr {
	var out []netip.Addr
	for _, p := range ipv4Prefixes(ifc) {
		out = append(out, p.Addr())
	}
	return out
}

// announce broadcasts a gratuitous ARP request for a on ifc: sender and
// target are a, so every host on the link (the gateway first) updates
// what it knows of the guest's MAC address.
func announce(ifc *net.Interface, a netip.Addr) error {
	if len(ifc.HardwareAddr) != 6 {
		return fmt.Errorf("%s has no Ethernet address", ifc.Name)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ip := a.As4()
	pkt := make([]byte, 28)
	binary.BigEndian.PutUint16(pkt[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(pkt[2:], 0x0800) // IPv4
	pkt[4], pkt[5] = 6, 4
	binary.BigEndian.PutUint16(pkt[6:], 1) // request
	copy(pkt[8:], ifc.HardwareAddr)
	copy(pkt[14:], ip[:])
	copy(pkt[24:], ip[:]) // the target MAC (18:24) stays zero
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	return unix.Sendto(fd, pkt, 0, to)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
