package main

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progressMin is the smallest transfer that gets a progress bar: below
// it a transfer is over before a bar would tell anything.
const progressMin = 4 << 20

// progressEvery is how often the bar is redrawn.
const progressEvery = 200 * time.Millisecond

// progress draws a one-line progress bar on a terminal: bytes done, the
// total if known, and the rate. It counts what goes through Write.
type progress struct {
	out   io.Writer
	label string
	total int64 // -1: unknown

	mu    sync.Mutex
	done  int64
	start time.Time
	drawn time.Time
}

// newProgress returns a bar, or nil when out is not a terminal or the
// transfer is small; a nil *progress counts nothing and draws nothing.
func newProgress(out io.Writer, terminal bool, label string, total int64) *progress {
	if !terminal || (total >= 0 && total < progressMin) {
		return nil
	}
	return &progress{out: out, label: label, total: total, start: time.Now()}
}

func (p *progress) Write(b []byte) (int, error) {
	if p == nil {
		return len(b), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(len(b))
	if now := time.Now(); now.Sub(p.drawn) >= progressEvery {
		p.drawn = now
		p.drawLocked(now)
	}
	return len(b), nil
}

func (p *progress) drawLocked(now time.Time) {
	rate := float64(p.done) / max(now.Sub(p.start).Seconds(), 1e-3)
	line := fmt.Sprintf("%s  %s", p.label, size(p.done))
	if p.total > 0 {
		const width = 30
		filled := int(float64(width) * float64(p.done) / float64(p.total))
		filled = min(max(filled, 0), width)
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if i < filled {
				bar[i] = '='
			}
		}
		line = fmt.Sprintf("%s [%s] %s / %s %3d%%", p.label, bar, size(p.done), size(p.total), p.done*100/p.total)
	}
	fmt.Fprintf(p.out, "\r%s  %s/s\x1b[K", line, size(int64(rate)))
}

// finish draws the final state and ends the line.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawLocked(time.Now())
	fmt.Fprintln(p.out)
}

// size formats a byte count for people.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
