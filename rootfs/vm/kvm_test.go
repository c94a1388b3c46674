package vm

import (
	"errors"
	"os"
	"testing"
)

// TestKVMUsable: without /dev/kvm (or without a working hypervisor behind
// it) the probe says no and why, rather than leaving it to QEMU to abort.
func TestKVMUsable(t *testing.T) {
	ok, why := kvmUsable()
	if _, err := os.Stat("/dev/kvm"); errors.Is(err, os.ErrNotExist) {
		if ok || why == "" {
			t.Fatalf("no /dev/kvm: usable %v, why %q", ok, why)
		}
		return
	}
	if !ok && why == "" {
		t.Fatal("KVM unusable without a reason")
	}
	t.Logf("KVM usable: %v %s", ok, why)
}

func TestFirstLine(t *testing.T) {
	if got := firstLine(errors.New("qemu exited: abort\nconsole:\n...")); got != "qemu exited: abort" {
		t.Fatalf("%q", got)
	}
}
