//go:build !amd64

package resume

// cpuRandom has no instruction to run off amd64.
func cpuRandom(dst []byte, n int) ([]byte, string) { return dst, "" }
