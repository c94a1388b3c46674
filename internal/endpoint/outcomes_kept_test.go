package endpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A repeat that says "attach": false gets the stream's id and nothing
// else: no output, no end, no input taken over. The first connection
// keeps the stream to itself.
func TestOpIDRepeatWithoutAttachStaysOut(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	gate := filepath.Join(t.TempDir(), "go")
	req := func() map[string]any {
		return map[string]any{"op": "exec", "op_id": "quiet-1", "argv": []string{"sh", "-c",
			"echo first; while [ ! -e " + gate + " ]; do sleep 0.02; done; echo second"}}
	}
	c1 := a.dial(t)
	st := resultStream(t, c1.call(req()))
	c2 := a.dial(t)
	r := req()
	r["attach"] = false
	if got := resultStream(t, c2.call(r)); got != st {
		t.Fatalf("the repeat made stream %d, the first %d", got, st)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, end := c1.collect(st); string(out["stdout"]) != "first\nsecond\n" || end["reason"] != "exit" {
		t.Fatalf("the first connection got stdout %q, end %v", out["stdout"], end)
	}
	// Everything the stream sent went out before the end reached c1; an
	// attached c2 has it queued before the answer to its next request.
	id := c2.send(map[string]any{"op": "list"})
	for {
		m, d := c2.read()
		if d != nil && d.Stream == st {
			t.Fatalf("a repeat with attach false was attached: it got %q of the stream's output", d.Payload)
		}
		if m == nil {
			continue
		}
		if s, ok := m["stream"].(float64); ok && uint64(s) == st {
			t.Fatalf("a repeat with attach false was attached: it got the stream's %v event", m["event"])
		}
		if v, ok := m["id"].(float64); ok && uint64(v) == id {
			break
		}
	}
}

// A cell queued on a connection that ends before the cell's turn never
// ran: a repeat of its op_id, sent on another connection while it waited,
// runs it then and answers with its stream (not with an empty result).
func TestOpIDRepeatRunsACellAbandonedBeforeItRan(t *testing.T) {
	a := newTestAgent(t)
	// An ordered op that holds its connection's queue until the
	// connection ends: the cell behind it is still waiting then.
	a.srv.ops["hold_queue"] = op{fn: func(c *call) (any, error) { <-c.ss.ctx.Done(); return nil, nil }, ordered: true}
	mark := filepath.Join(t.TempDir(), "ran")
	cell := func() map[string]any {
		return map[string]any{"op": "execute", "op_id": "cell-1", "attach": false,
			"code": "open(" + pyQuote(mark) + ", 'a').write('ran\\n')"}
	}
	c1 := a.dial(t)
	c1.send(map[string]any{"op": "hold_queue"})
	c1.send(cell())
	c2 := a.dial(t)
	repeat := c2.send(cell())
	time.Sleep(100 * time.Millisecond) // the repeat is read and waits on the first
	c1.c.CloseNow()
	r := c2.response(repeat)
	res, _ := r["result"].(map[string]any)
	if res == nil || res["stream"] == nil {
		t.Fatalf("the repeat of a cell that never ran answered %v: the cell was never run", r)
	}
	waitFor(t, "the cell ran", func() bool { b, _ := os.ReadFile(mark); return len(b) > 0 })
	time.Sleep(200 * time.Millisecond)
	if b, _ := os.ReadFile(mark); string(b) != "ran\n" {
		t.Fatalf("the cell ran %d times", strings.Count(string(b), "ran"))
	}
}

// pyQuote is s as a Python string literal.
func pyQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

// The outcome of a request whose stream still runs is kept for as long
// as the stream, past the time an answered outcome is kept: a repeat of a
// long command's request, hours later, gets its stream, and the command
// does not run a second time.
func TestOpIDOutcomeOfARunningStreamOutlivesItsTime(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	a.srv.outcomes.mu.Lock()
	a.srv.outcomes.keep = 50 * time.Millisecond
	a.srv.outcomes.mu.Unlock()
	dir := t.TempDir()
	log, gate := filepath.Join(dir, "runs"), filepath.Join(dir, "go")
	req := map[string]any{"op": "exec", "op_id": "long-1", "attach": false, "argv": []string{"sh", "-c",
		"echo ran >> " + log + "; while [ ! -e " + gate + " ]; do sleep 0.02; done"}}
	c := a.dial(t)
	st := resultStream(t, c.call(req))
	time.Sleep(200 * time.Millisecond) // four times the keeping time
	// Another request sweeps the table, as any request does.
	if r := c.call(map[string]any{"op": "file_mkdir", "op_id": "mk-1", "path": filepath.Join(dir, "d")}); r["error"] != nil {
		t.Fatal(r)
	}
	r := c.call(req)
	if errorCode(r) != "" {
		t.Fatalf("the repeat of a running command's request, past the keeping time: %v", r)
	}
	if got := resultStream(t, r); got != st {
		t.Fatalf("the repeat made stream %d, the first %d: the command ran again", got, st)
	}
	os.WriteFile(gate, nil, 0o644)
	if runs := lines(t, log); len(runs) != 1 {
		t.Fatalf("the command ran %d times", len(runs))
	}
}

// The table keeps as many outcomes as its maximum, not one fewer: with a
// maximum of 2, the two newest are both answered from the record.
func TestOpIDKeepsItsMaximum(t *testing.T) {
	t.Parallel()
	_, c, dir, mk := tableOfTwo(t)
	for _, n := range []string{"1", "2", "3"} {
		if r := c.call(mk(n)); r["error"] != nil {
			t.Fatal(r)
		}
	}
	for _, n := range []string{"2", "3"} {
		os.Remove(filepath.Join(dir, n))
		if r := c.call(mk(n)); r["error"] != nil {
			t.Fatalf("mk-%s, one of the 2 newest, was let go with a maximum of 2: %v", n, r)
		}
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Fatalf("mk-%s ran again", n)
		}
	}
	if r := c.call(mk("1")); errorCode(r) != "expired" {
		t.Fatalf("mk-1, the third newest, is still kept with a maximum of 2: %v", r)
	}
}

// tableOfTwo is an agent whose outcome table keeps at most 2, a
// connection to it, a directory, and mk: a file_mkdir there with op_id
// "mk-N".
func tableOfTwo(t *testing.T) (*testAgent, *rawConn, string, func(n string) map[string]any) {
	a := newTestAgent(t)
	a.srv.outcomes.mu.Lock()
	a.srv.outcomes.max = 2
	a.srv.outcomes.mu.Unlock()
	dir := t.TempDir()
	mk := func(n string) map[string]any {
		return map[string]any{"op": "file_mkdir", "op_id": "mk-" + n, "path": filepath.Join(dir, n)}
	}
	return a, a.dial(t), dir, mk
}
