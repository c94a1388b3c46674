package endpoint

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestAttachEventsCursor: attach from an events cursor replays only the
// events after it, in order, and says which end the stream reached.
func TestAttachEventsCursor(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	dir := t.TempDir()
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "watch", "path": dir}))
	for i := 1; i <= 5; i++ {
		if err := os.Mkdir(filepath.Join(dir, "d"+strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The first connection reads all five.
	for seen := 0; seen < 5; {
		if m, _ := rc.read(); m != nil && m["event"] == "fs" && uint64(m["stream"].(float64)) == id {
			seen++
			if m["seq"] != float64(seen) {
				t.Fatalf("event %d has seq %v", seen, m["seq"])
			}
		}
	}
	other := a.dial(t)
	if r := other.call(map[string]any{"op": "attach", "stream": id, "from": map[string]any{"events": 3}}); r["error"] != nil {
		t.Fatalf("attach from events 3: %v", r)
	}
	for want := 4; want <= 5; want++ {
		m := other.readControl()
		for m["event"] != "fs" {
			m = other.readControl()
		}
		if m["seq"] != float64(want) || m["path"] != filepath.Join(dir, "d"+strconv.Itoa(want)) {
			t.Fatalf("after attaching from 3: %v, want seq %d for d%d", m, want, want)
		}
	}
}
