package netconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseFacts: every malformed field is refused naming the field; good
// facts parse.
func TestParseFacts(t *testing.T) {
	for _, tc := range []struct {
		iface, addr, gw string
		dns             []string
		want            string
	}{
		{"", "10.0.2.15", "", nil, "network.address must be an IPv4 address with its prefix length"},
		{"", "fe80::1/64", "", nil, "network.address"},
		{"", "10.0.2.15/0", "", nil, "network.address"},
		{"", "", "gateway", nil, "network.gateway must be an IPv4 address"},
		{"", "10.0.2.15/24", "10.0.3.1", nil, "not in network.address's network 10.0.2.0/24"},
		{"", "", "", []string{"1.1.1.1", "8.8.8.8", "9.9.9.9", "1.0.0.1"}, "at most 3"},
		{"", "", "", []string{"nope"}, `network.dns: "nope" is not an IP address`},
		{"a/b", "", "", nil, "not an interface name"},
		{"averyveryverylongname", "", "", nil, "not an interface name"},
	} {
		if _, err := ParseFacts(tc.iface, tc.addr, tc.gw, tc.dns); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFacts(%q, %q, %q, %q): %v, want an error saying %q", tc.iface, tc.addr, tc.gw, tc.dns, err, tc.want)
		}
	}
	f, err := ParseFacts("eth0", "10.0.2.15/24", "10.0.2.2", []string{"10.0.2.3", "2001:db8::53"})
	if err != nil || f.Address.String() != "10.0.2.15/24" || f.Gateway.String() != "10.0.2.2" || len(f.DNS) != 2 || f.Empty() {
		t.Fatalf("good facts: %+v, %v", f, err)
	}
	if f, _ := ParseFacts("", "", "", nil); !f.Empty() {
		t.Errorf("no facts are not empty: %+v", f)
	}
}

// TestWriteResolvConf: the name servers are replaced, every other line
// kept; the same servers again change nothing.
func TestWriteResolvConf(t *testing.T) {
	ResolvConf = filepath.Join(t.TempDir(), "resolv.conf")
	t.Cleanup(func() { ResolvConf = "/etc/resolv.conf" })
	os.WriteFile(ResolvConf, []byte("search example.com\nnameserver 10.0.2.3\noptions edns0\n"), 0o644)
	f, _ := ParseFacts("", "", "", []string{"192.0.2.53", "192.0.2.54"})
	changed, err := writeResolvConf(f.DNS)
	b, _ := os.ReadFile(ResolvConf)
	if err != nil || !changed || string(b) != "search example.com\noptions edns0\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n" {
		t.Fatalf("resolv.conf: %q, changed %v, %v", b, changed, err)
	}
	if changed, err := writeResolvConf(f.DNS); err != nil || changed {
		t.Errorf("the same servers again: changed %v, %v", changed, err)
	}
}
