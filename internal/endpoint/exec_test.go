package endpoint

import "testing"

func TestExecEcho(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}))
	out, end := rc.collect(id)
	if string(out["stdout"]) != "out\n" || string(out["stderr"]) != "err\n" {
		t.Fatalf("output %q %q", out["stdout"], out["stderr"])
	}
	if end["reason"] != "exit" || end["exit_code"].(float64) != 3 || end["signal"] != nil {
		t.Fatalf("end %v", end)
	}
}
