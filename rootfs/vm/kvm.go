package vm

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
)

// KVM ioctls (linux/kvm.h): _IO(KVMIO, 0x00) and _IO(KVMIO, 0x01).
const (
	kvmGetAPIVersion = 0xAE00
	kvmCreateVM      = 0xAE01
	kvmAPIVersion    = 12 // the only stable KVM API
)

// kvmHung remembers that KVM did not boot a VM in this process: on a
// machine where it half works (nested KVM that hangs at boot) every later
// boot would wait out the same probe timeout before falling back to TCG.
var kvmHung atomic.Bool

// kvmUsable reports whether KVM works for this process: /dev/kvm opens,
// speaks the stable API and creates a VM. Asking first spares a QEMU
// start that aborts (a device node without a working hypervisor, as in
// many containers and nested setups).
func kvmUsable() (bool, string) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, err.Error()
	}
	defer f.Close()
	v, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), kvmGetAPIVersion, 0)
	if errno != 0 || v != kvmAPIVersion {
		return false, fmt.Sprintf("KVM_GET_API_VERSION: %d, %v", v, errno)
	}
	vmfd, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), kvmCreateVM, 0)
	if errno != 0 {
		return false, "KVM_CREATE_VM: " + errno.Error()
	}
	syscall.Close(int(vmfd))
	return true, ""
}

// firstLine is the first line of an error, for a one-line log: QEMU's own
// output and the console follow it in a boot error.
func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// KnownAccel is the accelerator Boot would pick now without probing:
// AccelTCG where KVM is unusable or did not boot a VM earlier in this
// process, else AccelAuto (a probe would decide). A test that starts
// another process booting VMs passes it on, so that process does not
// probe KVM again.
func KnownAccel() Accel {
	if ok, _ := kvmUsable(); !ok || kvmHung.Load() {
		return AccelTCG
	}
	return AccelAuto
}
