package resume

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The CRNG re-key. Every clone of a snapshot starts with the same kernel
// CRNG state; Linux reseeds it by itself only on a VMGenID change, and
// only where the VMM has that device. So on every resume the agent mixes
// material that differs per clone into the input pool (RNDADDENTROPY)
// and then has the CRNG take a new key from the pool (RNDRESEEDCRNG):
// mixing alone leaves an initialized CRNG on its old key until its next
// scheduled reseed, up to a minute later.

// ioctls of random(4), from linux/random.h.
const (
	rndAddEntropy = 0x40085203 // _IOW('R', 0x03, int[2])
	rndReseedCRNG = 0x5207     // _IO('R', 0x07)
)

// Bounds of the host's entropy (POST /v1/resume and /v1/init).
const (
	MinHostEntropy = 32
	MaxHostEntropy = 512
)

// hwrngBound bounds reading the hardware RNG: a virtio-rng whose host
// side is slow must not hold the resume up.
const hwrngBound = 20 * time.Millisecond

// Entropy source names, as last_resume's entropy_sources reports them.
const (
	EntropyHost    = "host"    // the host's bytes
	EntropyHWRNG   = "hwrng"   // /dev/hwrng
	EntropyRDSEED  = "rdseed"  // the CPU's entropy source
	EntropyRDRAND  = "rdrand"  // the CPU's DRBG
	EntropyTime    = "time"    // the resume's wall, monotonic and boot clocks
	EntropyVMClock = "vmclock" // the VMClock page (its generation counter, clock)
)

// CRNG re-keys the kernel's CRNG. The zero value is not usable; call
// NewCRNG.
type CRNG struct {
	hwrng   string // "" skips it
	vmclock string
	// unable says why the agent cannot re-key (no CAP_SYS_ADMIN), or nil.
	unable error
}

// NewCRNG checks once that the agent may re-key the CRNG; Unable says
// why not.
func NewCRNG() *CRNG {
	c := &CRNG{hwrng: "/dev/hwrng", vmclock: vmclockDefaultPath}
	if !hasCapSysAdmin() {
		c.unable = errors.New("the agent lacks CAP_SYS_ADMIN, which RNDADDENTROPY and RNDRESEEDCRNG need: clones of one snapshot share the kernel CRNG until the kernel reseeds by itself")
	}
	return c
}

// Unable says why the agent cannot re-key the CRNG, or nil.
func (c *CRNG) Unable() error { return c.unable }

// Rekey mixes host (may be nil) and what differs per clone into the
// input pool, then re-keys the CRNG. It returns the names of the sources
// it used, in a fixed order. The material is never logged.
func (c *CRNG) Rekey(host []byte) ([]string, error) {
	material, sources := c.gather(host)
	defer clear(material)
	if c.unable != nil {
		// Without the capability the bytes still reach the pool through
		// a write to /dev/urandom (anyone may): the CRNG takes them at
		// its next scheduled reseed, but not now.
		if f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0); err == nil {
			f.Write(material)
			f.Close()
		}
		return sources, c.unable
	}
	if err := addAndReseed(material); err != nil {
		return sources, err
	}
	return sources, nil
}

// gather collects the material: the host's bytes, the hardware RNG, the
// CPU's RNG, the clocks, the VMClock page.
func (c *CRNG) gather(host []byte) ([]byte, []string) {
	var sources []string
	buf := make([]byte, 0, len(host)+64+64+32+128)
	if len(host) > 0 {
		buf = append(buf, host...)
		sources = append(sources, EntropyHost)
	}
	if b := readBounded(c.hwrng, 64, hwrngBound); len(b) > 0 {
		buf = append(buf, b...)
		sources = append(sources, EntropyHWRNG)
	}
	var name string
	if buf, name = cpuRandom(buf, 8); name != "" {
		sources = append(sources, name)
	}
	for _, clk := range []int32{unix.CLOCK_REALTIME, unix.CLOCK_MONOTONIC, unix.CLOCK_BOOTTIME, unix.CLOCK_MONOTONIC_RAW} {
		var ts unix.Timespec
		if unix.ClockGettime(clk, &ts) == nil {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(ts.Sec))
			buf = binary.LittleEndian.AppendUint64(buf, uint64(ts.Nsec))
		}
	}
	sources = append(sources, EntropyTime)
	if b := vmclockPage(c.vmclock); len(b) > 0 {
		buf = append(buf, b...)
		sources = append(sources, EntropyVMClock)
	}
	return buf, sources
}

// addAndReseed is RNDADDENTROPY of material (credited with nothing: the
// CRNG is initialized long before a resume, and crediting host bytes the
// agent cannot judge would claim more than it knows), then RNDRESEEDCRNG.
func addAndReseed(material []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open /dev/urandom: %w", err)
	}
	defer f.Close()
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(material))
	binary.NativeEndian.PutUint32(info[0:], 0)
	binary.NativeEndian.PutUint32(info[4:], uint32(len(material)))
	copy(info[8:], material)
	defer clear(info)
	fd := f.Fd()
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, rndAddEntropy, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, fd, rndReseedCRNG, 0); e != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", e)
	}
	return nil
}

// readBounded reads up to n bytes of a character device within bound,
// or nothing. A read that outlives the bound ends by itself later (the
// device answers, or the goroutine stays parked on a device that never
// does: one per resume at most, for a broken hardware RNG).
func readBounded(path string, n int, bound time.Duration) []byte {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	got := make(chan []byte, 1)
	go func() {
		defer f.Close()
		b := make([]byte, n)
		k, _ := f.Read(b)
		got <- b[:k]
	}()
	select {
	case b := <-got:
		return b
	case <-time.After(bound):
		return nil
	}
}

// vmclockPage returns the VMClock structure's first 128 bytes (its
// counters and clock), or nothing without the device.
func vmclockPage(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	defer unix.Munmap(mem)
	if binary.LittleEndian.Uint32(mem) != vmclockMagic {
		return nil
	}
	return append([]byte(nil), mem[:128]...)
}

// hasCapSysAdmin reports whether CAP_SYS_ADMIN is in the agent's
// effective set.
func hasCapSysAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	const capSysAdmin = 21
	return data[capSysAdmin/32].Effective&(1<<(capSysAdmin%32)) != 0
}
