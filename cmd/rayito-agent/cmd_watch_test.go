package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a bytes.Buffer a command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWatchCommand: events come as JSON lines until the command is
// interrupted (exit 0); a flag may follow the path; bad paths exit 1.
func TestWatchCommand(t *testing.T) {
	url := startAgent(t, "cli-token")
	t.Setenv("RAYITO_ACCESS_TOKEN", "cli-token")
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	code := make(chan int, 1)
	go func() { code <- runWatch(ctx, []string{"--url", url, dir, "-r"}, &out, &errb) }()
	f := filepath.Join(dir, "a", "b", "f")
	// Until the watch is up, what is made is not reported: repeat.
	waitUntil(t, "the file's create event", func() bool {
		os.RemoveAll(filepath.Join(dir, "a"))
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(out.String(), `"path":"`+f+`"`)
	})
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d: %s", c, errb.String())
	}
	seq := uint64(0)
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev struct {
			Seq  uint64 `json:"seq"`
			Op   string `json:"op"`
			Path string `json:"path"`
			Dir  *bool  `json:"dir"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Seq != seq+1 || ev.Op == "" || ev.Dir == nil || !strings.HasPrefix(ev.Path, dir) {
			t.Fatalf("line %q: %+v %v", line, ev, err)
		}
		seq = ev.Seq
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--url", url, "relative"}, 1},
		{[]string{"--url", url, filepath.Join(dir, "missing")}, 1},
		{[]string{"--url", url}, 2},
	} {
		if c := runWatch(context.Background(), tc.args, &out, &errb); c != tc.code {
			t.Errorf("watch %v: exit %d, want %d", tc.args, c, tc.code)
		}
	}
	// The watch ends by itself when its directory goes.
	gone := filepath.Join(t.TempDir(), "gone")
	os.Mkdir(gone, 0o755)
	var outGone, errGone lockedBuffer
	go func() { code <- runWatch(context.Background(), []string{"--url", url, gone}, &outGone, &errGone) }()
	waitUntil(t, "the watch is up", func() bool {
		os.WriteFile(filepath.Join(gone, "probe"), nil, 0o644)
		return strings.Contains(outGone.String(), "probe")
	})
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	if c := <-code; c != 0 || !strings.Contains(errGone.String(), "ended (closed)") {
		t.Fatalf("exit %d after the directory went: %s", c, errGone.String())
	}
}
