package jupyter

import (
	"context"
	"testing"
)

// TestUnnamedKernelBecomesDefault: a kernel started without a name while
// there is no default kernel is the default one: cells that name no
// kernel run on it instead of starting a second kernel. A named one, or
// one started while there is a default, is not.
func TestUnnamedKernelBecomesDefault(t *testing.T) {
	t.Parallel()
	m := NewManager(Options{Registry: env.reg, Reaper: env.reaper})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	named, err := m.Start(ctx, StartOptions{Name: DefaultKernel})
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	second, err := m.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onDefault := func(code string) string {
		t.Helper()
		s, id, err := m.Execute(ctx, "", code, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		_, end := attach(t, s, 0).all()
		wantStatus(t, end, StatusOK)
		return id
	}
	if id := onDefault("x = 1"); id != first.ID() {
		t.Fatalf("a cell without a kernel ran on %s; the first unnamed kernel is %s (named %s, second %s)", id, first.ID(), named.ID(), second.ID())
	}
	if n := len(m.List()); n != 3 {
		t.Fatalf("%d kernels, want the 3 started (no extra default)", n)
	}
	// Once the default is shut down, the next unnamed kernel takes over.
	if err := m.Shutdown(ctx, first.ID()); err != nil {
		t.Fatal(err)
	}
	third, err := m.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id := onDefault("x = 2"); id != third.ID() {
		t.Fatalf("after the default's shutdown a cell ran on %s, want the next unnamed kernel %s", id, third.ID())
	}
}
