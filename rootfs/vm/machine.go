package vm

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// machine is what a snapshot and its restore must share: QEMU rebuilds the
// same machine and devices and then loads their state into them.
type machine struct {
	QEMU      string `json:"qemu"`
	Kernel    string `json:"kernel"`
	Initrd    string `json:"initrd"`
	Image     string `json:"image"`
	MemoryMiB int    `json:"memory_mib"`
	CPUs      int    `json:"cpus"`
	Accel     Accel  `json:"accel"`
	Cmdline   string `json:"cmdline"`
	GuestPort int    `json:"guest_port"`
	NoVMGenID bool   `json:"no_vmgenid,omitempty"`
	VsockCID  uint32 `json:"vsock_cid,omitempty"`
}

// instance is what differs between two QEMU processes of one machine.
type instance struct {
	Dir      string
	HostPort int
	GUID     string // vmgenid: a new one tells the guest it was restored
	Incoming string // migration source URI for a restore
}

func (in instance) disk() string   { return filepath.Join(in.Dir, "disk.qcow2") }
func (in instance) qmp() string    { return filepath.Join(in.Dir, "qmp.sock") }
func (in instance) serial() string { return filepath.Join(in.Dir, "serial.log") }
func (in instance) output() string { return filepath.Join(in.Dir, "qemu.log") }

// newMachine resolves cfg (with defaults) into a machine.
func newMachine(cfg Config, accel Accel) (machine, error) {
	m := machine{QEMU: cfg.QEMU, MemoryMiB: cfg.MemoryMiB, CPUs: cfg.CPUs, Accel: accel, GuestPort: cfg.GuestPort, NoVMGenID: cfg.NoVMGenID, VsockCID: cfg.VsockCID}
	for _, f := range []struct {
		name string
		in   string
		out  *string
	}{{"Kernel", cfg.Kernel, &m.Kernel}, {"Initrd", cfg.Initrd, &m.Initrd}, {"Image", cfg.Image, &m.Image}} {
		if f.in == "" {
			return machine{}, fmt.Errorf("vm: Config.%s is empty", f.name)
		}
		abs, err := filepath.Abs(f.in)
		if err != nil {
			return machine{}, err
		}
		if _, err := os.Stat(abs); err != nil {
			return machine{}, fmt.Errorf("vm: Config.%s: %w", f.name, err)
		}
		*f.out = abs
	}
	// preempt=full: a kernel path that runs long (a memory hog reclaiming
	// at its limit) yields to the agent at once rather than at its next
	// preemption point (operations.md, "Kernel command line").
	args := []string{"console=ttyS0", "root=/dev/vda", "rw", "panic=-1", "loglevel=4", "preempt=full"}
	if cfg.Init != "" {
		args = append(args, "init="+cfg.Init)
	}
	if cfg.KernelArgs != "" {
		args = append(args, cfg.KernelArgs)
	}
	m.Cmdline = strings.Join(args, " ")
	return m, nil
}

// qemuArgs is the QEMU command line for one instance of m. Everything that
// listens does so on 127.0.0.1 or on a unix socket.
func qemuArgs(m machine, in instance) []string {
	args := []string{"-M", "q35"}
	if m.Accel == AccelKVM {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		args = append(args, "-accel", "tcg,thread=multi", "-cpu", "max")
	}
	args = append(args,
		"-smp", strconv.Itoa(m.CPUs), "-m", strconv.Itoa(m.MemoryMiB),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "file,id=serial0,path="+in.serial(), "-serial", "chardev:serial0",
		"-qmp", "unix:"+in.qmp()+",server=on,wait=off",
		"-kernel", m.Kernel, "-initrd", m.Initrd, "-append", m.Cmdline,
		"-drive", "if=none,id=root,format=qcow2,file="+in.disk(),
		"-device", "virtio-blk-pci,drive=root",
		"-netdev", fmt.Sprintf("user,id=net0,hostfwd=tcp:127.0.0.1:%d-:%d", in.HostPort, m.GuestPort),
		"-device", "virtio-net-pci,netdev=net0",
		// A hardware RNG, as Firecracker and Cloud Hypervisor offer: one
		// of the agent's sources for the CRNG re-key on resume.
		"-object", "rng-random,id=rng0,filename=/dev/urandom",
		"-device", "virtio-rng-pci,rng=rng0",
		// Memory the guest frees (a pause's shrink drops its page cache)
		// is reported to QEMU, which discards it: it is then left out of
		// a snapshot as zero pages.
		"-device", "virtio-balloon-pci,free-page-reporting=on",
	)
	if !m.NoVMGenID {
		args = append(args, "-device", "vmgenid,id=vmgenid0,guid="+in.GUID)
	}
	if m.VsockCID != 0 {
		args = append(args, "-device", fmt.Sprintf("vhost-vsock-pci,guest-cid=%d", m.VsockCID))
	}
	if in.Incoming != "" {
		args = append(args, "-incoming", in.Incoming)
	}
	return args
}

// newGUID returns a random (version 4) UUID.
func newGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// freePort asks the kernel for a free port on 127.0.0.1. Another process
// may take it before QEMU binds it; QEMU then fails to start and says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// shellQuote quotes s for /bin/sh, which runs QEMU's exec: migration URIs.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
