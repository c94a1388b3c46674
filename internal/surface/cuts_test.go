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
	g, untrackOld := cs.Track(CutFunc(func(_ context.Context, g uint64) { oldCut.Store(g) }))
	if g != 1 {
		t.Fatalf("tracked under generation %d, want 1", g)
	}
	defer untrackOld()
	_, untrackGone := cs.Track(CutFunc(func(_ context.Context, g uint64) { goneCut.Store(g) }))
	untrackGone()
	gen.Store(2) // the resume publishes, then cuts
	g, untrackNew := cs.Track(CutFunc(func(_ context.Context, g uint64) { newCut.Store(g) }))
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
	_, u1 := cs.Track(slow)
	defer u1()
	_, u2 := cs.Track(CutFunc(func(ctx context.Context, _ uint64) { fast.Store(true); close(quick) }))
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
