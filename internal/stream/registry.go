package stream

import (
	"sort"
	"sync"
	"time"
)

// KeepEnded is how long an ended stream stays attachable, from the protocol.
const KeepEnded = 10 * time.Minute

// Registry owns every stream of the agent. Ids carry the registry's
// instance (see Instance) and are never reused, not even by a later run
// of the agent. The zero value is not usable; call NewRegistry.
type Registry struct {
	mu      sync.Mutex
	nextID  uint64
	streams map[uint64]*Stream
	keep    time.Duration
	stop    chan struct{}
	once    sync.Once // closes stop: Close may race with itself
	stopped sync.WaitGroup

	// The run this registry belongs to, and every id prefix it used (the
	// last is current).
	instance Instance
	prefixes []uint64
}

// NewRegistry returns a registry whose sweeper forgets ended streams after
// keep (KeepEnded if 0). Close stops the sweeper.
func NewRegistry(keep time.Duration) *Registry {
	if keep <= 0 {
		keep = KeepEnded
	}
	inst := NewInstance()
	r := &Registry{instance: inst, prefixes: []uint64{inst.prefix}, nextID: inst.prefix << idBits,
		streams: make(map[uint64]*Stream), keep: keep, stop: make(chan struct{})}
	r.stopped.Add(1)
	go r.sweep(min(keep/4, time.Minute))
	return r
}

// Create registers a new stream.
func (r *Registry) Create(cfg Config) *Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID = r.nextIDLocked()
	s := newStream(r.nextID, cfg, time.Now())
	r.streams[s.ID] = s
	return s
}

// Get returns the stream with the id, or nil.
func (r *Registry) Get(id uint64) *Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.streams[id]
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
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.forgetEnded(time.Now())
		}
	}
}

// forgetEnded drops streams that ended more than keep ago and have no
// attachment left.
func (r *Registry) forgetEnded(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, s := range r.streams {
		s.mu.Lock()
		old := s.end != nil && s.attached == 0 && now.Sub(s.endedAt) > r.keep
		s.mu.Unlock()
		if old {
			delete(r.streams, id)
		}
	}
}
