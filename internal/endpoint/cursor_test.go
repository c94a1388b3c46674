package endpoint

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/files"
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

// TestWatchHideTemp: a watch with hide_temp sees an upload as a create
// and a write of the file, in the protocol's fs events, and none of the
// agent's temporary file; a watch without it sees that file too.
func TestWatchHideTemp(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	dir := t.TempDir()
	rc := a.dial(t)
	hidden := resultStream(t, rc.call(map[string]any{"op": "watch", "path": dir, "hide_temp": true}))
	plain := resultStream(t, rc.call(map[string]any{"op": "watch", "path": dir}))
	target := filepath.Join(dir, "f")
	if resp, b := a.fileRequest(t, "PUT", url.Values{"path": {target}}, strings.NewReader("x")); resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	marker := filepath.Join(dir, "marker")
	os.WriteFile(marker, nil, 0o644)
	seen := map[uint64][]string{}
	for done := 0; done < 2; {
		m, _ := rc.read()
		if m == nil || m["event"] != "fs" {
			continue
		}
		id := uint64(m["stream"].(float64))
		seen[id] = append(seen[id], m["op"].(string)+" "+m["path"].(string))
		if m["path"] == marker {
			done++
		}
	}
	want := []string{"create " + target, "write " + target, "create " + marker}
	if !slices.Equal(seen[hidden], want) {
		t.Errorf("with hide_temp: %q, want %q", seen[hidden], want)
	}
	if len(seen[plain]) <= len(want) || !files.IsTemp(strings.Fields(seen[plain][0])[1]) {
		t.Errorf("without hide_temp: %q, want the temporary file's events first", seen[plain])
	}
}
