package resume

import (
	"os"
	"strings"
	"time"
)

// EmulatedKernelCheck bounds the kernel check where the CPU is emulated
// (QEMU TCG): a restored guest translates its code again before it runs
// at speed, and a live kernel took seconds to answer there.
const EmulatedKernelCheck = 10 * time.Second

// AutoKernelCheck is the kernel check's bound sized to this machine:
// DefaultKernelCheck, or EmulatedKernelCheck on an emulated CPU. A kernel
// that is alive but slower still is reported slow, never lost.
func AutoKernelCheck() time.Duration {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return kernelCheckFor(string(b))
}

// kernelCheckFor sizes the bound from /proc/cpuinfo: QEMU names its
// emulated CPUs "QEMU TCG CPU" (-cpu max) or "QEMU Virtual CPU" (its
// default models); under KVM the guest sees the host's model.
func kernelCheckFor(cpuinfo string) time.Duration {
	for _, line := range strings.Split(cpuinfo, "\n") {
		name, ok := strings.CutPrefix(line, "model name")
		if !ok {
			continue
		}
		if strings.Contains(name, "QEMU TCG CPU") || strings.Contains(name, "QEMU Virtual CPU") {
			return EmulatedKernelCheck
		}
		break
	}
	return DefaultKernelCheck
}
