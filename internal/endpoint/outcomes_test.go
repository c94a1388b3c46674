package endpoint

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
)

// lines is the file's lines, none if it is missing.
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// A repeat of an op_id on another connection, while the first run goes
// on, gets the same stream and its output from the start; the command
// ran once.
func TestOpIDRepeatWhileRunning(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	log := filepath.Join(t.TempDir(), "runs")
	gate := filepath.Join(t.TempDir(), "go")
	req := func() map[string]any {
		return map[string]any{"op": "exec", "op_id": "run-1", "argv": []string{"sh", "-c",
			"echo ran >> " + log + "; echo first; while [ ! -e " + gate + " ]; do sleep 0.02; done; echo second"}}
	}
	c1 := a.dial(t)
	st := resultStream(t, c1.call(req()))
	c2 := a.dial(t)
	again := c2.call(req())
	if got := resultStream(t, again); got != st {
		t.Fatalf("the repeat made stream %d, the first %d", got, st)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*rawConn{c1, c2} {
		out, end := c.collect(st)
		if string(out["stdout"]) != "first\nsecond\n" || end["reason"] != "exit" {
			t.Fatalf("stdout %q, end %v", out["stdout"], end)
		}
	}
	if runs := lines(t, log); len(runs) != 1 {
		t.Fatalf("the command ran %d times", len(runs))
	}
	// After the end, a repeat still gets the stream, attachable from the
	// start, or not attached at all if it says so.
	c3 := a.dial(t)
	r := req()
	r["attach"] = false
	if got := resultStream(t, c3.call(r)); got != st {
		t.Fatalf("a repeat after the end made stream %d", got)
	}
	if got := resultStream(t, c3.call(req())); got != st {
		t.Fatalf("a repeat after the end made stream %d", got)
	}
	if out, _ := c3.collect(st); string(out["stdout"]) != "first\nsecond\n" {
		t.Fatalf("replay %q", out["stdout"])
	}
	if runs := lines(t, log); len(runs) != 1 {
		t.Fatalf("the command ran %d times", len(runs))
	}
}

// A request that changes something without making a stream: the repeat
// answers as the first did (success, or its error) and runs nothing.
func TestOpIDRepeatAnswersAsTheFirst(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	dir := t.TempDir()
	from, to := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(from, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	move := map[string]any{"op": "file_move", "op_id": "mv-1", "from": from, "to": to}
	c := a.dial(t)
	if r := c.call(move); r["error"] != nil {
		t.Fatalf("move: %v", r)
	}
	// A second run would find no source and fail: a repeat succeeds.
	for _, cn := range []*rawConn{c, a.dial(t)} {
		if r := cn.call(map[string]any{"op": "file_move", "op_id": "mv-1", "to": to, "from": from}); r["error"] != nil {
			t.Fatalf("repeat (parameters in another order): %v", r)
		}
	}
	missing := map[string]any{"op": "file_remove", "op_id": "rm-1", "path": filepath.Join(dir, "none")}
	if code := errorCode(c.call(missing)); code != "not_found" {
		t.Fatalf("remove of nothing: %s", code)
	}
	if err := os.WriteFile(filepath.Join(dir, "none"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The repeat gets the first answer, and the file made since stays.
	if code := errorCode(c.call(missing)); code != "not_found" {
		t.Fatalf("repeat of a failed remove: %s", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "none")); err != nil {
		t.Fatalf("the repeat ran: %v", err)
	}
}

func TestOpIDErrors(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	c := a.dial(t)
	if c.hello["op_ids"] != true {
		t.Fatalf("hello does not say op_ids: %v", c.hello)
	}
	dir := t.TempDir()
	mk := func(opID any, path string) map[string]any {
		return map[string]any{"op": "file_mkdir", "op_id": opID, "path": filepath.Join(dir, path)}
	}
	for _, tc := range []struct {
		name string
		req  map[string]any
		code string
		msg  string
	}{
		{"empty", mk("", "x"), "bad_request", "op_id must be 1 to 64"},
		{"too long", mk(strings.Repeat("a", 65), "x"), "bad_request", "op_id must be 1 to 64"},
		{"space", mk("a b", "x"), "bad_request", "op_id may hold"},
		{"number", mk(7, "x"), "bad_request", "op_id must be a string"},
		{"other instance", map[string]any{"op": "file_mkdir", "op_id": "m", "instance": "old", "path": filepath.Join(dir, "x")}, "not_found", "whether the request with op_id \"m\" ran there is unknown"},
	} {
		r := c.call(tc.req)
		if errorCode(r) != tc.code || !strings.Contains(r["error"].(map[string]any)["message"].(string), tc.msg) {
			t.Errorf("%s: %v, want %s %q", tc.name, r, tc.code, tc.msg)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Fatal("a refused request ran")
	}
	if r := c.call(mk("m1", "y")); r["error"] != nil {
		t.Fatalf("mkdir: %v", r)
	}
	// The same op_id with other parameters, or for another op.
	for _, req := range []map[string]any{mk("m1", "z"), {"op": "file_remove", "op_id": "m1", "path": filepath.Join(dir, "y")}} {
		r := c.call(req)
		if errorCode(r) != "conflict" || !strings.Contains(r["error"].(map[string]any)["message"].(string), "was used for another request") {
			t.Fatalf("reuse: %v", r)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "z")); err == nil {
		t.Fatal("a reused op_id ran")
	}
	if _, err := os.Stat(filepath.Join(dir, "y")); err != nil {
		t.Fatal("a reused op_id removed the directory")
	}
	// An op that changes nothing ignores op_id: it runs each time.
	stat := map[string]any{"op": "file_stat", "op_id": "s", "path": filepath.Join(dir, "y")}
	if r := c.call(stat); r["error"] != nil {
		t.Fatal(r)
	}
	os.Remove(filepath.Join(dir, "y"))
	if code := errorCode(c.call(stat)); code != "not_found" {
		t.Fatalf("a read with an op_id answered from a record: %s", code)
	}
}

// Once its outcome is let go, a repeat is refused with expired, and
// nothing runs again.
func TestOpIDExpired(t *testing.T) {
	t.Parallel()
	a, c, dir, mk := tableOfTwo(t)
	for _, n := range []string{"1", "2", "3", "4"} {
		if r := c.call(mk(n)); r["error"] != nil {
			t.Fatal(r)
		}
	}
	if n := a.srv.outcomes.Len(); n > 3 {
		t.Fatalf("%d outcomes kept, at most 2 and the newest wanted", n)
	}
	os.Remove(filepath.Join(dir, "1"))
	r := c.call(mk("1"))
	if errorCode(r) != "expired" || !strings.Contains(r["error"].(map[string]any)["message"].(string), "it is not run again") {
		t.Fatalf("repeat of a let-go op_id: %v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "1")); err == nil {
		t.Fatal("an expired op_id ran again")
	}
	if r := c.call(mk("4")); r["error"] != nil {
		t.Fatalf("the newest outcome was let go: %v", r)
	}
}

// A stream's outcome is let go with its stream.
func TestOpIDExpiresWithItsStream(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, stream.Limits{MaxEnded: 1})
	c := a.dial(t)
	ex := func(n string) map[string]any {
		return map[string]any{"op": "exec", "op_id": "ex-" + n, "argv": []string{"true"}, "attach": false}
	}
	first := resultStream(t, c.call(ex("1")))
	waitFor(t, "the first command ended", func() bool { return a.streams.Get(first).Ended() != nil })
	if got := resultStream(t, c.call(ex("1"))); got != first {
		t.Fatalf("repeat made stream %d, the first %d", got, first)
	}
	second := resultStream(t, c.call(ex("2")))
	waitFor(t, "the first stream expired", func() bool { return a.streams.Get(first) == nil && a.streams.Get(second).Ended() != nil })
	if r := c.call(ex("1")); errorCode(r) != "expired" {
		t.Fatalf("repeat of an exec whose stream expired: %v", r)
	}
}

// The resume cut: every request the agent read before it is answered
// before the close frame and ran; none read after it runs.
func TestResumeCutAnswersWhatItRead(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	dir := t.TempDir()
	c := a.dial(t)
	const n = 300
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range n {
			b, _ := jsonBytes(map[string]any{"id": i + 1, "op": "file_mkdir", "path": filepath.Join(dir, "d", "r-"+strconv.Itoa(i))})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.c.Write(ctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				return
			}
			if i == n/3 {
				go a.resume.Resume(context.Background(), resume.Report{Source: resume.SourceHost})
			}
		}
	}()
	answered := map[string]bool{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, b, err := c.c.Read(ctx)
		cancel()
		if err != nil {
			if websocket.CloseStatus(err) != 4000 {
				t.Fatalf("ended with %v", err)
			}
			break
		}
		var m map[string]any
		if json.Unmarshal(b, &m) != nil || m["id"] == nil {
			continue
		}
		if m["error"] != nil {
			t.Fatalf("request %v: %v", m["id"], m["error"])
		}
		answered[strconv.Itoa(int(m["id"].(float64))-1)] = true
	}
	<-sent
	made, _ := os.ReadDir(filepath.Join(dir, "d"))
	if len(made) != len(answered) {
		t.Fatalf("%d requests answered before the close, %d ran", len(answered), len(made))
	}
	for _, e := range made {
		if !answered[e.Name()[strings.Index(e.Name(), "-")+1:]] {
			t.Fatalf("%s ran without an answer", e.Name())
		}
	}
	if len(answered) == 0 || len(answered) == n {
		t.Logf("the cut came at the edge: %d of %d answered", len(answered), n)
	}
}

// waitFor polls cond until it holds, for at most a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never true: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
