package resume

import "testing"

func TestKernelCheckSizedToTheMachine(t *testing.T) {
	for cpuinfo, want := range map[string]any{
		"processor\t: 0\nmodel name\t: QEMU TCG CPU version 2.5+\n":       EmulatedKernelCheck,
		"processor\t: 0\nmodel name\t: QEMU Virtual CPU version 2.5+\n":   EmulatedKernelCheck,
		"processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n": DefaultKernelCheck,
		"": DefaultKernelCheck,
	} {
		if got := kernelCheckFor(cpuinfo); got != want {
			t.Errorf("%q: %v, want %v", cpuinfo, got, want)
		}
	}
}
