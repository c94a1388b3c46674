package resume

import "golang.org/x/sys/cpu"

// rdrand64 and rdseed64 run the instruction once; false means the CPU
// had no value ready (CF clear), and the caller retries.
func rdrand64() (uint64, bool)
func rdseed64() (uint64, bool)

// cpuRandom appends up to n 64-bit words of the CPU's random number
// generator: RDSEED (the conditioned entropy source) where the CPU has
// it, else RDRAND. It names the instruction, or "" without either.
func cpuRandom(dst []byte, n int) ([]byte, string) {
	var get func() (uint64, bool)
	name := ""
	switch {
	case cpu.X86.HasRDSEED:
		get, name = rdseed64, "rdseed"
	case cpu.X86.HasRDRAND:
		get, name = rdrand64, "rdrand"
	default:
		return dst, ""
	}
	got := 0
	// Intel's guidance: a few retries per word; RDSEED may run dry under
	// contention, and a word less is no harm.
	for i := 0; i < n*10 && got < n; i++ {
		if v, ok := get(); ok {
			dst = append(dst, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
			got++
		}
	}
	if got == 0 {
		return dst, ""
	}
	return dst, name
}
