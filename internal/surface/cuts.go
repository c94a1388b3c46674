package surface

import (
	"context"
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

// CutFunc adapts a function to Cuttable.
type CutFunc func(ctx context.Context, gen uint64)

func (f CutFunc) Cut(ctx context.Context, gen uint64) { f(ctx, gen) }

// Cuts is the one registry of what a resume cuts, for every surface. Each
// entry records the resume generation it started under; a resume to
// generation G cuts only entries older than G. The resume sequence
// publishes G before it cuts, and Track reads the generation under the
// registry's lock, so an entry is either seen by the cut or started
// under G: a connection opened in the window between the publication
// and the cut is never cut by mistake.
type Cuts struct {
	gen func() uint64

	mu  sync.Mutex
	set map[*cutEntry]struct{}
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
	return &Cuts{gen: gen, set: map[*cutEntry]struct{}{}}
}

// Track registers c and returns the generation it started under and the
// function that unregisters it (call it when c has ended).
func (cs *Cuts) Track(c Cuttable) (gen uint64, untrack func()) {
	cs.mu.Lock()
	e := &cutEntry{c: c, gen: cs.gen()}
	cs.set[e] = struct{}{}
	cs.mu.Unlock()
	return e.gen, func() {
		cs.mu.Lock()
		delete(cs.set, e)
		cs.mu.Unlock()
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
