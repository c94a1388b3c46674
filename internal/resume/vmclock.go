package resume

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Offsets in the VMClock ABI structure (linux/vmclock-abi.h).
const (
	vmclockMagic       = 0x4b4c4356 // "VCLK"
	vmclockOffSeq      = 12
	vmclockOffFlags    = 24
	vmclockOffGen      = 104
	vmclockFlagGen     = 1 << 8 // VMCLOCK_FLAG_VM_GEN_COUNTER_PRESENT
	vmclockPollEvery   = 250 * time.Millisecond
	vmclockDefaultPath = "/dev/vmclock0"
)

// VMClockWatcher polls the VMClock device's vm_generation_counter, which
// the hypervisor changes on every snapshot restore.
type VMClockWatcher struct {
	mem  []byte
	stop chan struct{}
	done chan struct{}
	last atomic.Uint64
}

// WatchVMClock maps the device (path "" means /dev/vmclock0) and calls
// report on every generation change until Close. It fails when the device
// is missing or does not offer the generation counter.
func WatchVMClock(path string, report func()) (*VMClockWatcher, error) {
	if path == "" {
		path = vmclockDefaultPath
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	if binary.LittleEndian.Uint32(mem) != vmclockMagic {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%s: not a VMClock structure", path)
	}
	w := &VMClockWatcher{mem: mem, stop: make(chan struct{}), done: make(chan struct{})}
	gen, ok := w.read()
	if !ok {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%s: no vm_generation_counter", path)
	}
	w.last.Store(gen)
	go w.loop(report)
	return w, nil
}

// read returns the generation counter under the structure's seqcount.
func (w *VMClockWatcher) read() (uint64, bool) {
	for {
		seq := atomic.LoadUint32((*uint32)(ptr(w.mem, vmclockOffSeq)))
		if seq&1 != 0 {
			continue
		}
		flags := binary.LittleEndian.Uint64(w.mem[vmclockOffFlags:])
		gen := binary.LittleEndian.Uint64(w.mem[vmclockOffGen:])
		if atomic.LoadUint32((*uint32)(ptr(w.mem, vmclockOffSeq))) == seq {
			return gen, flags&vmclockFlagGen != 0
		}
	}
}

func (w *VMClockWatcher) loop(report func()) {
	defer close(w.done)
	t := time.NewTicker(vmclockPollEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			if gen, _ := w.read(); gen != w.last.Load() {
				w.last.Store(gen)
				report()
			}
		}
	}
}

// Close stops polling and unmaps the device.
func (w *VMClockWatcher) Close() {
	close(w.stop)
	<-w.done
	unix.Munmap(w.mem)
}
