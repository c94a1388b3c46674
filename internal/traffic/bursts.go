package traffic

import (
	"sync/atomic"
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
// transfer itself. Between bursts the watcher sleeps until the next
// counted byte, so an idle agent is not woken for it. One watcher per
// Counter.
type BurstWatcher struct {
	stop   chan struct{}
	done   chan struct{}
	checks atomic.Int64 // ticks looked at, for tests
}

// burstTick is how often the end of a burst is looked for while bytes
// cross.
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
			w.checks.Add(1)
			total := c.in.Load() + c.out.Load()
			last := c.lastMono.Load()
			if c.clock.Mono()-time.Duration(last) < b.Quiet {
				continue // bytes still cross
			}
			if total-base >= b.MinBytes {
				base = total
				hook()
			}
			t.Stop()
			if !w.sleep(c, last) {
				return
			}
			t.Reset(every)
		}
	}()
	return w
}

// sleep waits for a byte counted after last (the newest activity the
// caller saw); false means the watch is closing. Touch sets lastMono
// before it looks at asleep, and this sets asleep before it looks at
// lastMono again, so a byte is never missed between the two.
func (w *BurstWatcher) sleep(c *Counter, last int64) bool {
	select {
	case <-c.wake: // a stale wake-up from a sleep that did not happen
	default:
	}
	c.asleep.Store(true)
	if c.lastMono.Load() != last {
		c.asleep.Store(false)
		return true
	}
	select {
	case <-w.stop:
		return false
	case <-c.wake:
		return true
	}
}

// Close stops watching and waits for a hook that is running.
func (w *BurstWatcher) Close() {
	close(w.stop)
	<-w.done
}
