package files

import (
	"bytes"
	"io"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// watched yields size bytes of x, notes the most big buffers held while
// it is read, and waits at half-way for gate (when not nil).
type watched struct {
	left, half int
	gate       func()
	most       *atomic.Int32
}

func (r *watched) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	for {
		held, most := bigHeld.Load(), r.most.Load()
		if held <= most || r.most.CompareAndSwap(most, held) {
			break
		}
	}
	if r.gate != nil && r.left <= r.half {
		r.gate()
		r.gate = nil
	}
	n := min(len(p), r.left)
	copy(p[:n], bytes.Repeat([]byte("x"), n))
	r.left -= n
	return n, nil
}

// A small upload never takes a big buffer. (Not parallel: the count of
// big buffers is the agent's, shared by every upload.)
func TestReadFromSmallStaysSmall(t *testing.T) {
	m, _ := newManager(t)
	w, err := m.Create("", filepath.Join(t.TempDir(), "f"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var most atomic.Int32
	if n, err := w.ReadFrom(&watched{left: smallBuf - 1, most: &most}); err != nil || n != smallBuf-1 {
		t.Fatalf("ReadFrom: %d, %v", n, err)
	}
	if _, err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if most.Load() != 0 {
		t.Fatalf("a %d-byte upload held %d big buffers", smallBuf-1, most.Load())
	}
}

// Many large uploads at once hold at most maxBigBufs big buffers
// together, all finish whole, and give every buffer back.
func TestReadFromBigBuffersBounded(t *testing.T) {
	m, _ := newManager(t)
	dir := t.TempDir()
	const uploads, size = 3 * maxBigBufs / 2, 3 * bigBuf
	var most atomic.Int32
	var halfway, done sync.WaitGroup
	halfway.Add(uploads)
	gate := func() { halfway.Done(); halfway.Wait() } // all at once from half-way
	for i := range uploads {
		done.Add(1)
		go func() {
			defer done.Done()
			p := filepath.Join(dir, strconv.Itoa(i))
			w, err := m.Create("", p, WriteOptions{})
			if err != nil {
				t.Error(err)
				halfway.Done()
				return
			}
			n, err := w.ReadFrom(&watched{left: size, half: size / 2, gate: gate, most: &most})
			if err != nil || n != size {
				t.Errorf("ReadFrom: %d, %v", n, err)
			}
			if c, err := w.Commit(); err != nil || c.Size != size {
				t.Errorf("commit: %+v, %v", c, err)
			}
		}()
	}
	done.Wait()
	if got := most.Load(); got == 0 || got > maxBigBufs {
		t.Fatalf("%d large uploads held up to %d big buffers together, want 1 to %d", uploads, got, maxBigBufs)
	}
	if held := bigHeld.Load(); held != 0 {
		t.Fatalf("%d big buffers not given back", held)
	}
}
