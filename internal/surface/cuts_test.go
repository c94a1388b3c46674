package surface

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestCutsOnlyOlderGenerations: a resume to generation G cuts what
// started before G, never what started under G (opened between the
// generation's publication and the cut), and a cut entry that ended is
// not cut again.
func TestCutsOnlyOlderGenerations(t *testing.T) {
	t.Parallel()
	var gen atomic.Uint64
	gen.Store(1)
	cs := NewCuts(gen.Load)
	var oldCut, newCut, goneCut atomic.Uint64
	g, untrackOld, _ := cs.Track(CutFunc(func(_ context.Context, g uint64) { oldCut.Store(g) }))
	if g != 1 {
		t.Fatalf("tracked under generation %d, want 1", g)
	}
	defer untrackOld()
	_, untrackGone, _ := cs.Track(CutFunc(func(_ context.Context, g uint64) { goneCut.Store(g) }))
	untrackGone()
	gen.Store(2) // the resume publishes, then cuts
	g, untrackNew, _ := cs.Track(CutFunc(func(_ context.Context, g uint64) { newCut.Store(g) }))
	defer untrackNew()
	if g != 2 {
		t.Fatalf("tracked after the publication under %d, want 2", g)
	}
	cs.CutForResume(context.Background(), 2)
	if oldCut.Load() != 2 {
		t.Errorf("the entry from generation 1 was not cut by the resume to 2")
	}
	if newCut.Load() != 0 {
		t.Errorf("an entry opened under generation 2 was cut by the resume to 2")
	}
	if goneCut.Load() != 0 {
		t.Errorf("an entry that had ended was cut")
	}
	if n := cs.Len(); n != 2 {
		t.Errorf("%d entries registered, want 2", n)
	}
}

// TestCutsConcurrently: the entries are cut at once, so one that takes
// the whole bound does not use up the others' time.
func TestCutsConcurrently(t *testing.T) {
	t.Parallel()
	cs := NewCuts(nil)
	var fast atomic.Bool
	slow := CutFunc(func(ctx context.Context, _ uint64) { <-ctx.Done() })
	quick := make(chan struct{})
	_, u1, _ := cs.Track(slow)
	defer u1()
	_, u2, _ := cs.Track(CutFunc(func(ctx context.Context, _ uint64) { fast.Store(true); close(quick) }))
	defer u2()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { cs.CutForResume(ctx, 1); close(done) }()
	<-quick // the quick one ran while the slow one holds its bound
	<-done
	if !fast.Load() {
		t.Fatal("the quick entry was not cut")
	}
}

// leaver is a websocket, as a shutdown sees it: Leave closes it, and it
// is untracked a little later, when its session has ended.
type leaver struct {
	CutFunc
	left    chan struct{}
	untrack func()
}

func (l *leaver) Leave(context.Context) {
	close(l.left)
	go func() { time.Sleep(20 * time.Millisecond); l.untrack() }()
}

// TestCutsShutdown: a shutdown has every Leaver leave, waits until each
// is untracked, refuses new entries, and does not wait for entries that
// are not Leavers (requests, which the HTTP server waits for).
func TestCutsShutdown(t *testing.T) {
	t.Parallel()
	cs := NewCuts(nil)
	var ls []*leaver
	for range 3 {
		l := &leaver{CutFunc: func(context.Context, uint64) {}, left: make(chan struct{})}
		_, l.untrack, _ = cs.Track(l)
		ls = append(ls, l)
	}
	_, untrackRequest, _ := cs.Track(CutFunc(func(context.Context, uint64) {}))
	defer untrackRequest()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs.Shutdown(ctx)
	if ctx.Err() != nil {
		t.Fatal("the shutdown waited for its bound")
	}
	for i, l := range ls {
		select {
		case <-l.left:
		default:
			t.Errorf("leaver %d was not told to leave", i)
		}
	}
	if cs.Len() != 1 {
		t.Errorf("%d entries after the shutdown, want the request's", cs.Len())
	}
	if !cs.Closing() {
		t.Error("not closing after a shutdown")
	}
	if _, _, err := cs.Track(CutFunc(func(context.Context, uint64) {})); err != ErrClosing {
		t.Errorf("tracking during the shutdown: %v", err)
	}
	cs.Shutdown(ctx) // again: returns
}
