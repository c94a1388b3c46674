package traffic

import (
	"time"
)

// Burst says what counts as a burst of traffic that has ended: at least
// MinBytes crossed, then none for Quiet.
type Burst struct {
	MinBytes uint64
	Quiet    time.Duration
}

// BurstWatcher calls a hook once after each burst of traffic has ended.
// The agent gives the memory a burst left behind back to the system then:
// the Go runtime collects garbage only as the heap grows, so after a large
// transfer over any surface (a protobuf message per chunk of output, a
// request body per chunk of input) the heap it grew to would stay resident
// until the next forced collection, minutes later, and be written into
// every snapshot meanwhile. Waiting for quiet keeps the collection off the
// transfer itself.
type BurstWatcher struct {
	stop chan struct{}
	done chan struct{}
}

// burstTick is how often the end of a burst is looked for.
const burstTick = time.Second

// WatchBursts starts watching c; hook runs on the watcher's goroutine, so
// a slow hook delays the next check rather than overlapping itself.
func WatchBursts(c *Counter, b Burst, hook func()) *BurstWatcher {
	return watchBursts(c, b, burstTick, hook)
}

func watchBursts(c *Counter, b Burst, every time.Duration, hook func()) *BurstWatcher {
	w := &BurstWatcher{stop: make(chan struct{}), done: make(chan struct{})}
	base := c.in.Load() + c.out.Load() // what crossed before the watch
	go func() {
		defer close(w.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			total := c.in.Load() + c.out.Load()
			quiet := c.clock.Mono() - time.Duration(c.lastMono.Load())
			if total-base >= b.MinBytes && quiet >= b.Quiet {
				base = total
				hook()
			}
		}
	}()
	return w
}

// Close stops watching and waits for a hook that is running.
func (w *BurstWatcher) Close() {
	close(w.stop)
	<-w.done
}
