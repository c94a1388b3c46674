package vm

import (
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// Accel is how QEMU runs the guest's CPU.
type Accel string

const (
	// AccelAuto tries KVM if /dev/kvm is usable and the guest becomes
	// healthy within Config.KVMProbeTimeout, and falls back to TCG:
	// nested KVM has been seen to hang at boot.
	AccelAuto Accel = ""
	AccelKVM  Accel = "kvm"
	AccelTCG  Accel = "tcg"
)

// Defaults for the zero values of Config.
const (
	DefaultMemoryMiB       = 512
	DefaultCPUs            = 1
	DefaultGuestPort       = 49983
	DefaultKVMProbeTimeout = 30 * time.Second
	DefaultQEMU            = "qemu-system-x86_64"
)

// Init selects the guest's PID 1.
const (
	InitDefault = ""                     // /sbin/init: rayito-init
	InitSystemd = "/lib/systemd/systemd" // rayito-agent.service
)

// Config describes a VM to boot. The zero value of every field but the
// three files means the default.
type Config struct {
	Kernel string // bzImage (build/vmlinuz)
	Initrd string // build/initramfs.cpio.gz
	Image  string // root filesystem, raw ext4 (build/rootfs.ext4); never written

	// WorkDir holds the disk layer, the QMP socket and the serial log.
	// Empty: a new temporary directory, removed by Close.
	WorkDir string

	MemoryMiB int
	CPUs      int
	Accel     Accel
	// Init is the guest's PID 1 (init= on the kernel command line).
	Init string
	// KernelArgs are appended to the kernel command line; later
	// parameters win, so "loglevel=7" shows the kernel's boot messages.
	KernelArgs string
	// GuestPort is the agent's port in the guest; HostPort the one on
	// 127.0.0.1 forwarded to it (0: a free one).
	GuestPort int
	HostPort  int
	// NoVMGenID leaves out the VMGenID device, as on VMMs that have none
	// (Cloud Hypervisor): then Linux does not reseed its CRNG on a restore
	// by itself. A snapshot restores only with the setting it was taken
	// with.
	NoVMGenID bool
	// VsockCID, when not 0, gives the guest a vsock device with this
	// context id (vhost-vsock-pci: needs /dev/vhost-vsock on this
	// machine), so the host reaches the agent at vsock://CID:49983.
	VsockCID uint32

	QEMU            string
	KVMProbeTimeout time.Duration
	Log             *zap.Logger
}

// BuildConfig returns a Config for the artifacts that rootfs/build-image.sh
// writes into dir (usually build/).
func BuildConfig(dir string) Config {
	return Config{
		Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initramfs.cpio.gz"),
		Image:  filepath.Join(dir, "rootfs.ext4"),
	}
}

func (c Config) withDefaults() Config {
	if c.MemoryMiB == 0 {
		c.MemoryMiB = DefaultMemoryMiB
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.GuestPort == 0 {
		c.GuestPort = DefaultGuestPort
	}
	if c.QEMU == "" {
		c.QEMU = DefaultQEMU
	}
	if c.KVMProbeTimeout == 0 {
		c.KVMProbeTimeout = DefaultKVMProbeTimeout
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	return c
}
