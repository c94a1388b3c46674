package endpoint

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestInstance: hello, /health, attach and list name the agent's run, and
// a request for another run (a stream id it made, or its instance id) is
// not_found saying the agent restarted: a client that knew the agent
// before a restart must never read a new stream's output as its own.
func TestInstance(t *testing.T) {
	t.Parallel()
	a, earlier := newTestAgent(t), newTestAgent(t) // two runs of the agent
	inst := a.streams.Instance()
	if inst == "" || inst == earlier.streams.Instance() {
		t.Fatalf("instances %q and %q", inst, earlier.streams.Instance())
	}
	rc := a.dial(t)
	if rc.hello["instance"] != inst {
		t.Fatalf("hello %v, want instance %s", rc.hello, inst)
	}
	resp, err := http.Get(a.http.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h["instance"] != inst {
		t.Fatalf("/health %v, want instance %s", h, inst)
	}

	mine := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"echo", "mine"}, "tag": "job", "attach": false}))
	old := resultStream(t, earlier.dial(t).call(map[string]any{"op": "exec", "argv": []string{"echo", "theirs"}, "tag": "job", "attach": false}))
	if mine == old || mine >= 1<<53 || old >= 1<<53 {
		t.Fatalf("stream ids %d and %d: equal, or not below 2^53", mine, old)
	}
	for _, c := range []struct {
		name string
		req  map[string]any
	}{
		{"attach another run's stream", map[string]any{"op": "attach", "stream": old}},
		{"attach with another instance", map[string]any{"op": "attach", "tag": "job", "instance": earlier.streams.Instance()}},
		{"attach a stream of this run with another instance", map[string]any{"op": "attach", "stream": mine, "instance": "0123"}},
		{"signal another run's stream", map[string]any{"op": "signal", "stream": old, "signal": "SIGTERM"}},
		{"detach another run's stream", map[string]any{"op": "detach", "stream": old}},
	} {
		r := rc.call(c.req)
		e, _ := r["error"].(map[string]any)
		if errorCode(r) != "not_found" || !strings.Contains(e["message"].(string), "agent restarted") {
			t.Errorf("%s: %v, want not_found saying the agent restarted", c.name, r)
		}
	}
	r := rc.call(map[string]any{"op": "attach", "tag": "job", "instance": inst})
	res, _ := r["result"].(map[string]any)
	if res == nil || res["instance"] != inst || uint64(res["stream"].(float64)) != mine {
		t.Fatalf("attach with this instance: %v", r)
	}
	r = rc.call(map[string]any{"op": "list"})
	if res, _ := r["result"].(map[string]any); res == nil || res["instance"] != inst {
		t.Fatalf("list: %v", r)
	}
	// A stream of this run that does not exist is just not found.
	r = rc.call(map[string]any{"op": "attach", "stream": mine + 1000})
	if e, _ := r["error"].(map[string]any); errorCode(r) != "not_found" || strings.Contains(e["message"].(string), "restarted") {
		t.Fatalf("attach of an unknown stream of this run: %v", r)
	}
	// An id no run could have made (below 2^32, or 2^53 and above) is not
	// blamed on a restart.
	for _, id := range []uint64{5, 1 << 53} {
		r = rc.call(map[string]any{"op": "attach", "stream": id})
		if e, _ := r["error"].(map[string]any); errorCode(r) != "not_found" || !strings.Contains(e["message"].(string), "no run of the agent makes such an id") {
			t.Fatalf("attach of stream %d: %v", id, r)
		}
	}
}
