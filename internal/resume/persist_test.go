package resume

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// diskChecker is a Kernels that, each time the manager lists kernels
// (which it does while saving its state), checks that no generation has
// been published that is not on disk yet.
type diskChecker struct {
	dir string
	m   *Manager
	mu  sync.Mutex
	bad []string
}

func (d *diskChecker) Check(ctx context.Context) []KernelHealth { return d.List() }

func (d *diskChecker) List() []KernelHealth {
	if d.m != nil {
		d.verify("while saving")
	}
	return []KernelHealth{{Kernel: "k1", State: "alive"}}
}

// verify records a published generation above the one on disk. It reads
// the published one first: the disk only grows, so a fixed agent always
// passes.
func (d *diskChecker) verify(when string) {
	published := d.m.Generation()
	p, found, err := loadState(d.dir)
	if err != nil || !found || p.Generation < published {
		d.mu.Lock()
		d.bad = append(d.bad, when+": published "+itoa(published)+", on disk "+itoa(p.Generation))
		d.mu.Unlock()
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestGenerationOnDiskBeforePublished: a generation a client can read
// (/health, hello) is already on disk, so an agent killed at any moment
// comes back with it and never with an older one.
func TestGenerationOnDiskBeforePublished(t *testing.T) {
	dir := t.TempDir()
	d := &diskChecker{dir: dir}
	m, err := New(Options{StateDir: dir, Kernels: d, SetClock: func(time.Time) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	d.m = m
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a client polling /health meanwhile
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				d.verify("polling")
			}
		}
	}()
	for i := range 30 {
		m.Resume(context.Background(), Report{Source: SourceHost, ResumeID: "r" + itoa(uint64(i))})
		m.KernelsChanged()
	}
	close(stop)
	wg.Wait()
	d.verify("at the end")
	if len(d.bad) > 0 {
		t.Fatalf("%d times a generation was visible before it was on disk, first: %s", len(d.bad), d.bad[0])
	}
	if p, _, _ := loadState(dir); p.Generation != 30 || m.Generation() != 30 {
		t.Fatalf("generation %d, on disk %d, want 30", m.Generation(), p.Generation)
	}
}
