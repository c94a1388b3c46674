package stream

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"time"
)

// KeepEnded is how long an ended stream stays attachable, from the protocol.
const KeepEnded = 10 * time.Minute

// DefaultMaxEnded is how many ended streams stay attachable at most.
const DefaultMaxEnded = 1000

// ErrBudget is returned when retention budget cannot be set aside.
var ErrBudget = errors.New("retention budget")

// Limits bound what a registry retains. Zero fields take their defaults.
type Limits struct {
	// Budget is the memory the logs of every stream may retain together
	// (DefaultBudget).
	Budget int64
	// MaxEnded is how many ended streams stay attachable (DefaultMaxEnded).
	MaxEnded int
	// MaxEndedBytes is how much memory ended streams may keep together
	// (a quarter of Budget).
	MaxEndedBytes int64
	// KeepEnded is how long an ended stream stays attachable (KeepEnded).
	KeepEnded time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.Budget <= 0 {
		l.Budget = DefaultBudget()
	}
	if l.MaxEnded <= 0 {
		l.MaxEnded = DefaultMaxEnded
	}
	if l.MaxEndedBytes <= 0 {
		l.MaxEndedBytes = l.Budget / 4
	}
	if l.KeepEnded <= 0 {
		l.KeepEnded = KeepEnded
	}
	return l
}

// releaseDelay is how long the registry waits, once much retained memory
// was let go, before it hands memory back to the system: a burst of
// streams ending is one release, not one per stream. releaseEvery bounds
// how often it does (each release runs the collector).
const (
	releaseDelay = 200 * time.Millisecond
	releaseEvery = time.Second
)

// reclaimEvery bounds how often writers waiting for memory scan every
// stream for memory to let go.
const reclaimEvery = 10 * time.Millisecond

// Registry owns every stream of the agent. Ids carry the registry's
// instance (see Instance) and are never reused, not even by a later run
// of the agent. Ended streams stay attachable within the registry's
// Limits, the oldest expiring first. The zero value is not usable; call
// NewRegistry.
type Registry struct {
	limits Limits
	budget *Budget

	mu          sync.Mutex
	nextID      uint64
	streams     map[uint64]*Stream
	ended       []*Stream // in the order they ended
	expired     uint64    // streams that expired
	lastReclaim time.Time
	reclaims    uint64 // reclaim calls, for tests

	stop    chan struct{}
	once    sync.Once // closes stop: Close may race with itself
	stopped sync.WaitGroup

	// The run this registry belongs to, and every id prefix it used (the
	// last is current) with the last id it issued under each (the
	// current one's is nextID, kept there).
	instance Instance
	prefixes []uint64
	lastIDs  []uint64
}

// NewRegistry returns a registry that keeps ended streams for keep
// (KeepEnded if 0) and the other Limits at their defaults.
func NewRegistry(keep time.Duration) *Registry {
	return NewRegistryWith(Limits{KeepEnded: keep})
}

// NewRegistryWith returns a registry with the given limits. Its sweeper
// lets ended streams expire and hands memory back to the system after
// bursts; Close stops it.
func NewRegistryWith(l Limits) *Registry {
	l = l.withDefaults()
	inst := NewInstance()
	r := &Registry{limits: l, budget: newBudget(l.Budget), streams: make(map[uint64]*Stream), stop: make(chan struct{}),
		instance: inst, prefixes: []uint64{inst.prefix}, lastIDs: []uint64{0}, nextID: inst.prefix << idBits}
	r.stopped.Add(1)
	go r.sweep(min(l.KeepEnded/4, time.Minute))
	return r
}

// Limits returns the registry's limits, defaults filled in.
func (r *Registry) Limits() Limits { return r.limits }

// Budget returns the retention budget every stream of the registry shares.
func (r *Registry) Budget() *Budget { return r.budget }

// Expired returns how many ended streams expired so far.
func (r *Registry) Expired() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.expired
}

// Reservation is retention budget set aside for a stream about to be
// created; Create uses it up, Release gives it back if the stream never
// was.
type Reservation struct {
	b    *Budget
	n    int64
	once sync.Once
}

// Reserve sets n bytes of the budget aside for a new stream (its `buffer`).
// When the budget cannot, even after letting ended streams expire, it
// fails with an error wrapping ErrBudget.
func (r *Registry) Reserve(n int64) (*Reservation, error) {
	if !r.budget.take(n) {
		r.mu.Lock()
		r.expireForLocked(shortBy{least: n}, n)
		r.mu.Unlock()
		if !r.budget.take(n) {
			st := r.budget.Stats()
			return nil, fmt.Errorf("%w: cannot set aside %s; %s of the agent's %s are in use",
				ErrBudget, FormatBytes(n), FormatBytes(st.Used), FormatBytes(st.Limit))
		}
	}
	return &Reservation{b: r.budget, n: n}, nil
}

// use hands the reservation to a stream.
func (res *Reservation) use() int64 {
	n := int64(0)
	res.once.Do(func() { n = res.n })
	return n
}

// Release gives the reservation back unless a stream used it.
func (res *Reservation) Release() {
	if res != nil {
		res.once.Do(func() { res.b.give(res.n) })
	}
}

// Create registers a new stream.
func (r *Registry) Create(cfg Config) *Stream {
	var reserve int64
	if cfg.Reservation != nil {
		reserve = cfg.Reservation.use()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID = r.nextIDLocked()
	s := newStream(r.nextID, cfg, time.Now(), r, reserve)
	r.streams[s.ID] = s
	return s
}

// Get returns the stream with the id, or nil.
func (r *Registry) Get(id uint64) *Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streams[id]
}

// IsExpired reports whether id was a stream of this registry that ended
// and expired (as opposed to an id that never was).
func (r *Registry) IsExpired(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streams[id] != nil || id&(1<<idBits-1) == 0 {
		return false
	}
	// Ids grow within a prefix: those up to the last issued under it were.
	for i, p := range r.prefixes {
		if owns(p, id) {
			if i == len(r.prefixes)-1 {
				return id <= r.nextID
			}
			return id <= r.lastIDs[i]
		}
	}
	return false
}

// Find returns the newest stream matching pid (if non-zero) or tag (if
// non-empty), preferring running streams, or nil.
func (r *Registry) Find(pid int, tag string) *Stream {
	var best *Stream
	for _, s := range r.List("") {
		if (pid != 0 && s.Pid != pid) || (tag != "" && s.Tag != tag) {
			continue
		}
		if best == nil || (best.Ended() != nil && s.Ended() == nil) || (best.Ended() == nil) == (s.Ended() == nil) {
			best = s
		}
	}
	return best
}

// List returns the streams of a kind ("" for all) in id order.
func (r *Registry) List(kind Kind) []*Stream {
	r.mu.Lock()
	out := make([]*Stream, 0, len(r.streams))
	for _, s := range r.streams {
		if kind == "" || s.Kind == kind {
			out = append(out, s)
		}
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Close stops the sweeper. Streams stay readable.
func (r *Registry) Close() {
	r.once.Do(func() { close(r.stop) })
	r.stopped.Wait()
}

func (r *Registry) sweep(every time.Duration) {
	defer r.stopped.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	var release <-chan time.Time
	var last time.Time
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.forgetEnded(time.Now())
		case <-r.budget.release:
			if release == nil {
				release = time.After(max(releaseDelay, time.Until(last.Add(releaseEvery))))
			}
		case <-release:
			release = nil
			r.budget.released()
			r.budget.chunks.drain()
			debug.FreeOSMemory()
			last = time.Now()
		}
	}
}

// noteEnded puts a stream that just ended at the back of the ended
// streams and lets the oldest expire beyond the count and bytes limits.
func (r *Registry) noteEnded(s *Stream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streams[s.ID] != s {
		return
	}
	r.ended = append(r.ended, s)
	// The stream that just ended stays even if it alone is over the bytes
	// bound: it was within the budget while it ran, and a client that
	// started it with a big buffer means to read it.
	for len(r.ended) > r.limits.MaxEnded || r.budget.Stats().Ended > r.limits.MaxEndedBytes {
		if !r.expireOldestLocked(s) {
			return
		}
	}
}

// forgetEnded lets streams that ended more than KeepEnded ago expire.
func (r *Registry) forgetEnded(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range slices.Clone(r.ended) {
		s.mu.Lock()
		old, idle := now.Sub(s.endedAt) > r.limits.KeepEnded, s.attached == 0
		s.mu.Unlock()
		if !old {
			return
		}
		if idle {
			r.expireLocked(s)
		}
	}
}

// expireOldestLocked lets the oldest ended stream that no client is
// attached to expire, other than keep; false if there is none.
func (r *Registry) expireOldestLocked(keep *Stream) bool {
	for _, s := range r.ended {
		if s == keep {
			continue
		}
		s.mu.Lock()
		idle := s.attached == 0
		s.mu.Unlock()
		if idle {
			r.expireLocked(s)
			return true
		}
	}
	return false
}

func (r *Registry) expireLocked(s *Stream) {
	if i := slices.Index(r.ended, s); i >= 0 {
		r.ended = slices.Delete(r.ended, i, i+1)
	}
	delete(r.streams, s.ID)
	r.expired++
	s.mu.Lock()
	s.freeLocked()
	s.mu.Unlock()
}

// reclaim makes room in a full budget for a writer that is short: ended
// streams that no client is attached to expire, oldest first, then
// every stream lets go of what its clients acknowledged. Expiring walks
// only the ended list, so it runs for every writer that asks (a writer
// turned away while an ended stream could have gone would drop its own
// output); the scan of every stream is bounded to one per reclaimEvery.
func (r *Registry) reclaim(short shortBy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reclaims++
	need := max(short.least, maxChunk)
	r.expireForLocked(short, need)
	if r.budget.room(short.floor) >= need {
		return
	}
	now := time.Now()
	if now.Sub(r.lastReclaim) < reclaimEvery {
		return
	}
	r.lastReclaim = now
	for _, s := range r.streams {
		s.mu.Lock()
		s.trimAckedLocked()
		s.mu.Unlock()
	}
}

// expireForLocked lets ended streams no client is attached to expire,
// oldest first, until short's share has need bytes of room, but none
// unless all of them together would give it at least short.least: an
// ended stream's output is someone's to read, and must not go for
// nothing. It would when the rest of the budget is over the writer's
// share by more than they hold: small streams (below their floor) that
// filled the floors' share, or a buffer larger than the budget can hold.
func (r *Registry) expireForLocked(short shortBy, need int64) {
	room := r.budget.room(short.floor)
	for _, s := range r.ended {
		if room >= short.least {
			break
		}
		s.mu.Lock()
		if s.attached == 0 {
			room += s.chargeLocked()
		}
		s.mu.Unlock()
	}
	if room < short.least {
		return
	}
	for r.budget.room(short.floor) < need && r.expireOldestLocked(nil) {
	}
}

// FormatBytes writes a size for people: 4 MiB, 1.5 GiB, 512 B.
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, u := float64(n), 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[u])
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
