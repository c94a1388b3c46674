package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func testFiles(t *testing.T) Config {
	dir := t.TempDir()
	cfg := Config{
		Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd"),
		Image:  filepath.Join(dir, "rootfs.ext4"),
	}
	for _, f := range []string{cfg.Kernel, cfg.Initrd, cfg.Image} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

// argAfter returns the value following flag whose value contains sub.
func argAfter(args []string, flag, sub string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && strings.Contains(args[i+1], sub) {
			return args[i+1]
		}
	}
	return ""
}

func TestQEMUArgs(t *testing.T) {
	cfg := testFiles(t)
	cfg.Init = InitSystemd
	cfg.KernelArgs = "rayito.hostname=box"
	m, err := newMachine(cfg.withDefaults(), AccelTCG)
	if err != nil {
		t.Fatal(err)
	}
	in := instance{Dir: "/work", HostPort: 40001, GUID: "8b2ee3a4-7d3e-4d0a-9a51-4cb2ad1b6d10"}
	args := qemuArgs(m, in)

	if got := argAfter(args, "-netdev", "hostfwd"); got != "user,id=net0,hostfwd=tcp:127.0.0.1:40001-:49983" {
		t.Errorf("netdev %q: the agent port must be forwarded from 127.0.0.1 only", got)
	}
	if got := argAfter(args, "-device", "vmgenid"); !strings.Contains(got, "guid="+in.GUID) {
		t.Errorf("vmgenid device %q", got)
	}
	if got := argAfter(args, "-device", "virtio-balloon"); got != "virtio-balloon-pci,free-page-reporting=on" {
		t.Errorf("balloon device %q: freed guest memory must be reported, to leave it out of snapshots", got)
	}
	if got := argAfter(args, "-accel", ""); got != "tcg,thread=multi" || argAfter(args, "-cpu", "") != "max" {
		t.Errorf("accel %q", got)
	}
	if got := argAfter(args, "-m", ""); got != "512" {
		t.Errorf("memory %q", got)
	}
	if got := argAfter(args, "-append", ""); !strings.Contains(got, "init=/lib/systemd/systemd") ||
		!strings.Contains(got, "console=ttyS0") || !strings.HasSuffix(got, " rayito.hostname=box") {
		t.Errorf("kernel command line %q", got)
	}
	if slices.Contains(args, "-incoming") {
		t.Error("-incoming on a cold boot")
	}
	if got := argAfter(args, "-qmp", ""); got != "unix:/work/qmp.sock,server=on,wait=off" {
		t.Errorf("qmp %q", got)
	}

	in.Incoming = "exec:cat '/snap/state'"
	if got := argAfter(qemuArgs(m, in), "-incoming", ""); got != in.Incoming {
		t.Errorf("incoming %q", got)
	}
	m.Accel = AccelKVM
	if got := argAfter(qemuArgs(m, in), "-accel", ""); got != "kvm" {
		t.Errorf("kvm accel %q", got)
	}
}

func TestNewMachineChecksFiles(t *testing.T) {
	cfg := testFiles(t)
	cfg.Initrd = filepath.Join(t.TempDir(), "missing")
	if _, err := newMachine(cfg.withDefaults(), AccelTCG); err == nil || !strings.Contains(err.Error(), "Initrd") {
		t.Errorf("missing initrd: err = %v", err)
	}
	cfg.Initrd = ""
	if _, err := newMachine(cfg.withDefaults(), AccelTCG); err == nil || !strings.Contains(err.Error(), "Initrd") {
		t.Errorf("empty initrd: err = %v", err)
	}
}

func TestNewGUID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := newGUID(), newGUID()
	if !re.MatchString(a) || !re.MatchString(b) || a == b {
		t.Errorf("GUIDs %q, %q", a, b)
	}
}

func TestShellQuote(t *testing.T) {
	for _, s := range []string{"/tmp/snap/state", "/tmp/it's here/$HOME `x` \"y\"", ""} {
		out, err := exec.Command("/bin/sh", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sh sees %q (%v), want %q", out, err, s)
		}
	}
}
