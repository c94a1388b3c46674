package endpoint

import (
	"strconv"
	"testing"
)

// TestCellsRunInRequestOrder: cells sent back to back, without waiting for
// their responses, run on the kernel in the order they were sent.
func TestCellsRunInRequestOrder(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	const n = 60
	first := rc.send(map[string]any{"op": "execute", "code": "order = []", "attach": false})
	for i := 1; i <= n; i++ {
		rc.send(map[string]any{"op": "execute", "code": "order.append(" + strconv.Itoa(i) + ")", "attach": false})
	}
	last := rc.send(map[string]any{"op": "execute", "code": "order == list(range(1, " + strconv.Itoa(n+1) + "))"})
	for id := first; id < last; id++ {
		if r := rc.response(id); r["result"] == nil {
			t.Fatalf("execute %d: %v", id, r)
		}
	}
	st := resultStream(t, rc.response(last))
	for {
		m := rc.readControl()
		if m["stream"] == nil || uint64(m["stream"].(float64)) != st {
			continue
		}
		if m["event"] == "cell" && m["type"] == "result" {
			if got := m["data"].(map[string]any)["text/plain"]; got != "True" {
				t.Fatalf("cells ran out of order: order == [1..%d] is %v", n, got)
			}
		}
		if m["event"] == "end" {
			if m["status"] != "ok" {
				t.Fatalf("last cell: %v", m)
			}
			return
		}
	}
}
