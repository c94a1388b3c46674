package files

import (
	"sync"
	"sync/atomic"
)

// ReadFrom's buffers grow with the upload and are bounded for the agent.
// Every buffer costs a hand-off between goroutines and its thread
// wake-ups, dear on a VM, so a large upload wants big ones: on tmpfs an
// HTTP upload took 705 to 738 MB/s with 1 MiB, 611 to 663 with 512 KiB
// and 610 to 621 with 256 KiB (same hour, quiet machine). But most
// uploads are small files, and many may run at once, so an upload starts
// with small buffers, takes big ones once it has filled a small one, and
// only while all uploads together hold fewer than maxBigBufs.
const (
	smallBuf   = 64 << 10
	bigBuf     = 1 << 20
	maxBigBufs = 32 // 32 MiB, 16 large uploads at full speed at once
)

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}
	bigBufs   = sync.Pool{New: func() any { b := make([]byte, bigBuf); return &b }}
	bigHeld   atomic.Int32 // big buffers taken and not yet given back
)

// grownBuf returns a big buffer in place of b if there is one to spare,
// else b.
func grownBuf(b *[]byte) *[]byte {
	if len(*b) == bigBuf {
		return b
	}
	for {
		held := bigHeld.Load()
		if held >= maxBigBufs {
			return b
		}
		if bigHeld.CompareAndSwap(held, held+1) {
			break
		}
	}
	smallBufs.Put(b)
	return bigBufs.Get().(*[]byte)
}

// putBuf gives a buffer back to its pool.
func putBuf(b *[]byte) {
	if len(*b) == bigBuf {
		bigBufs.Put(b)
		bigHeld.Add(-1)
		return
	}
	smallBufs.Put(b)
}
