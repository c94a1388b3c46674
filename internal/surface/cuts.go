package surface

import (
	"context"
	"errors"
	"sync"
)

// A Cuttable is something a resume ends: a websocket session, a streamed
// call, a long response. Cut ends it in its surface's way (an `end` event
// and close code 4000, a Connect error, close code 1012, an error line)
// and returns once that is handed to the connection or ctx ends; it may
// be called while the thing is ending by itself.
type Cuttable interface {
	Cut(ctx context.Context, gen uint64)
}

// A Leaver is a Cuttable that a shutdown closes too (a websocket): Leave
// tells its client the agent is going away (close code 1001) and
// returns once that is handed to the connection or ctx ends. A shutdown
// waits for every Leaver to be untracked; other entries end with their
// request, which the HTTP server's own shutdown waits for.
type Leaver interface {
	Cuttable
	Leave(ctx context.Context)
}

// ErrClosing is Track's answer once a shutdown has begun: the caller
// closes what it would have tracked, with its surface's "going away".
var ErrClosing = errors.New("the agent is shutting down")

// CutFunc adapts a function to Cuttable.
type CutFunc func(ctx context.Context, gen uint64)

func (f CutFunc) Cut(ctx context.Context, gen uint64) { f(ctx, gen) }

// Cuts is the one registry of long-lived connections, for every
// surface: what a resume cuts, and what a shutdown closes. Each
// entry records the resume generation it started under; a resume to
// generation G cuts only entries older than G. The resume sequence
// publishes G before it cuts, and Track reads the generation under the
// registry's lock, so an entry is either seen by the cut or started
// under G: a connection opened in the window between the publication
// and the cut is never cut by mistake. In the same way an entry is
// either seen by a shutdown or refused (ErrClosing).
type Cuts struct {
	gen func() uint64

	mu      sync.Mutex
	set     map[*cutEntry]struct{}
	closing bool
	leavers int           // Leavers tracked
	left    chan struct{} // closed when leavers is 0 after a shutdown began
}

type cutEntry struct {
	c   Cuttable
	gen uint64
}

// NewCuts returns a registry that reads the current generation from gen
// (nil: always 0).
func NewCuts(gen func() uint64) *Cuts {
	if gen == nil {
		gen = func() uint64 { return 0 }
	}
	return &Cuts{gen: gen, set: map[*cutEntry]struct{}{}, left: make(chan struct{})}
}

// Track registers c and returns the generation it started under and the
// function that unregisters it (call it when c has ended). Once a
// shutdown has begun it registers nothing and answers ErrClosing.
func (cs *Cuts) Track(c Cuttable) (gen uint64, untrack func(), err error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closing {
		return 0, nil, ErrClosing
	}
	e := &cutEntry{c: c, gen: cs.gen()}
	cs.set[e] = struct{}{}
	_, leaver := c.(Leaver)
	if leaver {
		cs.leavers++
	}
	var once sync.Once
	return e.gen, func() {
		once.Do(func() {
			cs.mu.Lock()
			defer cs.mu.Unlock()
			delete(cs.set, e)
			if leaver {
				if cs.leavers--; cs.leavers == 0 && cs.closing {
					close(cs.left)
				}
			}
		})
	}, nil
}

// Closing reports whether a shutdown has begun: surfaces refuse new
// long-lived connections before they accept them.
func (cs *Cuts) Closing() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.closing
}

// Each calls fn for every entry registered now (the native surface tells
// its sessions of a pause this way).
func (cs *Cuts) Each(fn func(Cuttable)) {
	cs.mu.Lock()
	all := make([]Cuttable, 0, len(cs.set))
	for e := range cs.set {
		all = append(all, e.c)
	}
	cs.mu.Unlock()
	for _, c := range all {
		fn(c)
	}
}

// Shutdown refuses new entries, has every Leaver leave, all at once, and
// waits until each is untracked, or for ctx. A second call waits too.
func (cs *Cuts) Shutdown(ctx context.Context) {
	cs.mu.Lock()
	first := !cs.closing
	cs.closing = true
	var leavers []Leaver
	for e := range cs.set {
		if l, ok := e.c.(Leaver); ok {
			leavers = append(leavers, l)
		}
	}
	if first && cs.leavers == 0 {
		close(cs.left)
	}
	cs.mu.Unlock()
	for _, l := range leavers {
		go l.Leave(ctx)
	}
	select {
	case <-cs.left:
	case <-ctx.Done():
	}
}

// Generation is the current resume generation.
func (cs *Cuts) Generation() uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.gen()
}

// Len is how many entries are registered.
func (cs *Cuts) Len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.set)
}

// CutForResume cuts every entry older than gen, all at once, and returns
// when each Cut has returned (each is bounded by ctx).
func (cs *Cuts) CutForResume(ctx context.Context, gen uint64) {
	cs.mu.Lock()
	var old []Cuttable
	for e := range cs.set {
		if e.gen < gen {
			old = append(old, e.c)
		}
	}
	cs.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range old {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Cut(ctx, gen)
		}()
	}
	wg.Wait()
}
