package jupyter

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/wire"
)

func writeSpec(t *testing.T, dataDir, name, body string) string {
	t.Helper()
	dir := filepath.Join(dataDir, "kernels", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kernel.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestFindSpec(t *testing.T) {
	t.Parallel()
	first, second := t.TempDir(), t.TempDir()
	firstDir := writeSpec(t, first, "py", `{"argv": ["/bin/py", "-f", "{connection_file}", "--res={resource_dir}"], "interrupt_mode": "message", "env": {"A": "1"}}`)
	writeSpec(t, second, "py", `{"argv": ["/bin/other"]}`)
	writeSpec(t, second, "julia", `{"argv": ["/bin/julia"]}`)
	writeSpec(t, second, "broken", `{"argv": [`)
	writeSpec(t, second, "empty", `{"argv": []}`)
	dirs := []string{first, second}

	spec, err := findSpec(dirs, "py")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := spec.argv("/run/c.json"), []string{"/bin/py", "-f", "/run/c.json", "--res=" + firstDir}; !reflect.DeepEqual(got, want) {
		t.Fatalf("argv %q, want %q (the first data dir wins)", got, want)
	}
	if spec.InterruptMode != interruptMessage || spec.Env["A"] != "1" {
		t.Fatalf("spec %+v", spec)
	}

	for _, tc := range []struct{ name, code, mention string }{
		{"python3", "unavailable", "python3-ipykernel"},
		{"ruby", "not_found", "julia"},
		{"../py", "bad_request", "invalid"},
		{"broken", "unavailable", "kernel.json"},
		{"empty", "unavailable", "no argv"},
	} {
		_, err := findSpec(dirs, tc.name)
		wantCode(t, err, wire.Code(tc.code))
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: error %q does not mention %q", tc.name, err, tc.mention)
		}
	}
}

func TestStandardDataDirs(t *testing.T) {
	t.Setenv("JUPYTER_PATH", "/a"+string(os.PathListSeparator)+"/b")
	t.Setenv("JUPYTER_DATA_DIR", "")
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "/home/u")
	want := []string{"/a", "/b", "/home/u/.local/share/jupyter", "/usr/local/share/jupyter", "/usr/share/jupyter"}
	if got := StandardDataDirs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestStartTimeoutBoundsTheWholeStart: the manager's start bound covers a
// kernel that never binds its ports (it used to bound only the wait after
// the bind, leaving each surface to add a 2-minute bound of its own), and
// the error names the flag.
func TestStartTimeoutBoundsTheWholeStart(t *testing.T) {
	data := t.TempDir()
	writeSpec(t, data, "mute", `{"argv": ["/bin/sleep", "60"], "display_name": "never binds", "language": "python"}`)
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper, DataDirs: []string{data}, StartTimeout: time.Second})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	_, err := m.Start(ctx, StartOptions{Name: "mute"})
	if err == nil || !strings.Contains(err.Error(), "not ready within 1s (--kernel-start-timeout)") {
		t.Fatalf("a kernel that never binds, with a 1 s start bound: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the start outlived the test's own 50 s bound")
	}
}
