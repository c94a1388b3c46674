package resume

import "unsafe"

// ptr returns a pointer into a mapped region, for atomic loads of fields
// that the hypervisor updates concurrently.
func ptr(mem []byte, off int) unsafe.Pointer { return unsafe.Pointer(&mem[off]) }
