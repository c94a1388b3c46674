package watch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/stream"
)

// TestHideTemp: a watch with HideTemp sees the agent's atomic writes (a
// temporary file renamed over the target) as a create and a write of the
// target, new or replaced, and nothing of the temporary file; a watch
// without it on the same directory still sees the temporary file.
func TestHideTemp(t *testing.T) {
	t.Parallel()
	reg := stream.NewRegistry(0)
	m := NewManagerWith(reg, ManagerOptions{Logger: zaptest.NewLogger(t), IsTemp: files.IsTemp})
	t.Cleanup(func() { m.Close(); reg.Close() })
	fm, err := files.New(files.Options{Registry: reg, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fm.Close() })
	dir := t.TempDir()
	hidden, err := m.WatchWith(dir, Options{HideTemp: true})
	if err != nil {
		t.Fatal(err)
	}
	plain := mustWatch(t, m, dir, false)
	ch, cp := attach(t, hidden, 0), attach(t, plain, 0)

	target := filepath.Join(dir, "f")
	for round, content := range []string{"new", "replaced"} {
		up := fm.Stage("", files.WriteOptions{})
		if err := up.Add(target, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
		if _, err := up.Commit(); err != nil {
			t.Fatal(err)
		}
		marker := filepath.Join(dir, "marker-"+content)
		touch(t, marker)
		isMarker := func(e fsEvent) bool { return e.Op == "create" && e.Path == marker }
		got := describe(ch.until(isMarker))
		want := []string{"create " + target + " file", "write " + target + " file", "create " + marker + " file"}
		if !slices.Equal(got, want) {
			t.Errorf("round %d: the hiding watch saw %q, want %q", round, got, want)
		}
		sawTemp := false
		for _, e := range cp.until(isMarker) {
			sawTemp = sawTemp || files.IsTemp(e.Path)
		}
		if !sawTemp {
			t.Errorf("round %d: the plain watch did not see the temporary file", round)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "replaced" {
		t.Fatalf("target holds %q", b)
	}
}
