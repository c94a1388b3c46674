package stream

import (
	"sync"

	"golang.org/x/sys/unix"
)

// Bounds of the default retention budget: a sixteenth of the machine's
// memory, within these. The cap keeps the agent lean in a big VM too: a
// few streams' default buffers fill it, beyond that clients' acks pace
// the output; --retention-budget raises it for big `buffer` requests.
const (
	MinDefaultBudget = 32 << 20
	MaxDefaultBudget = 64 << 20
	// MinBudget is the smallest budget the agent accepts: room for a
	// default buffer and the floors of a few dozen streams.
	MinBudget = 8 << 20
)

// streamFloor is what any stream may hold however full the budget is
// otherwise: the last part of the budget (1/floorShare) is kept for
// streams that hold less than this. With it every stream makes progress,
// so a client that reads one stream at a time is never stuck behind
// another stream it has not read yet, and a terminal opened while
// commands fill the budget still shows its output. Nothing is set aside
// for it: a stream that holds nothing costs nothing.
const streamFloor = 64 << 10

// floorShare says which part of the budget (1/floorShare) only streams
// below their floor may use.
const floorShare = 8

// DefaultBudget is the retention budget the agent uses unless told
// otherwise: a sixteenth of physical memory, between MinDefaultBudget and
// MaxDefaultBudget.
func DefaultBudget() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return MinDefaultBudget
	}
	total := int64(si.Totalram) * int64(si.Unit)
	return min(max(total/16, MinDefaultBudget), MaxDefaultBudget)
}

// Budget bounds the memory that the logs of all streams retain together:
// the buffers of byte channels and the encoded events of event channels.
//
// Each stream is charged the larger of what its logs hold and what it set
// aside while it runs (its `buffer`); an ended stream only what it holds. A log that needs more than its stream's share waits for
// room (Block) or discards its own oldest data (Drop), so the sum never
// exceeds the limit. Budget's lock is taken under a stream's lock, never
// the other way round.
type Budget struct {
	mu      sync.Mutex
	limit   int64
	used    int64 // sum of the charges of every stream
	peak    int64
	ended   int64 // held by ended streams (part of used)
	input   int64 // queued input programs have not read (part of used)
	waiting bool
	changed chan struct{} // closed when memory was given back and someone waits

	// high is the most used since memory was last handed back to the
	// system; once use falls well below it, release is signalled.
	high    int64
	release chan struct{}

	chunks chunkPool
}

// releaseAfter is how far use must fall below its high mark (and at least
// by half) before the agent hands memory back to the system: far enough
// that it does not happen while a fast stream recycles its chunks, nor
// for every small stream (the registry also releases at most once a
// second).
const releaseAfter = 2 << 20

func newBudget(limit int64) *Budget {
	if limit <= 0 {
		limit = DefaultBudget()
	}
	return &Budget{limit: limit, changed: make(chan struct{}), release: make(chan struct{}, 1)}
}

// BudgetStats is a snapshot of a budget for metrics and tests.
type BudgetStats struct {
	Limit int64 // bytes
	Used  int64 // charged now: held, or set aside by running streams
	Peak  int64 // highest Used ever
	Ended int64 // held by ended streams
	Input int64 // queued input programs have not read
}

// Stats returns the budget's counters.
func (b *Budget) Stats() BudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetStats{Limit: b.limit, Used: b.used, Peak: b.peak, Ended: b.ended, Input: b.input}
}

// take charges n more bytes if they fit, short of the floors' share.
func (b *Budget) take(n int64) bool {
	ok, _ := b.takeOrWait(n, false)
	return ok
}

// give uncharges n bytes and wakes writers waiting for room.
func (b *Budget) give(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.high-b.used >= releaseAfter && b.used <= b.high/2 {
		select {
		case b.release <- struct{}{}:
		default:
		}
	}
	if b.waiting {
		b.waiting = false
		close(b.changed)
		b.changed = make(chan struct{})
	}
}

// chargeInput charges n bytes of queued input, room or not: input within
// its window is never refused (protocol section 5), so it is the output
// that waits, or drops, for it. A nil budget charges nothing.
func (b *Budget) chargeInput(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.input += n
	b.used += n
	b.peak = max(b.peak, b.used)
	b.high = max(b.high, b.used)
	b.mu.Unlock()
}

// giveInput uncharges n bytes of input the program read, or that went
// with it.
func (b *Budget) giveInput(n int64) {
	if b == nil || n == 0 {
		return
	}
	b.mu.Lock()
	b.input -= n
	b.mu.Unlock()
	b.give(n)
}

// released records that memory was handed back to the system: the high
// mark starts again from what is used now.
func (b *Budget) released() {
	b.mu.Lock()
	b.high = b.used
	b.mu.Unlock()
}

// takeOrWait charges n more bytes if they fit (in the whole budget for a
// stream still below its floor, else short of the floors' share), or
// returns a channel that is closed the next time memory is given back.
func (b *Budget) takeOrWait(n int64, floor bool) (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.limit - b.limit/floorShare
	if floor {
		limit = b.limit
	}
	if b.used+n > limit {
		b.waiting = true
		return false, b.changed
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	b.high = max(b.high, b.used)
	return true, nil
}

// short reports whether a writer waits for memory.
func (b *Budget) short() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting
}

// addEnded moves n bytes held by a stream into (or, negative, out of) the
// count of what ended streams hold.
func (b *Budget) addEnded(n int64) {
	b.mu.Lock()
	b.ended += n
	b.mu.Unlock()
}

// free is what is left of the budget for growth and reservations.
func (b *Budget) free() int64 { return b.room(false) }

// room is what is left for a charge in its share: short of the floors'
// share, or (floor) the whole budget.
func (b *Budget) room(floor bool) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if floor {
		return b.limit - b.used
	}
	return b.limit - b.limit/floorShare - b.used
}
