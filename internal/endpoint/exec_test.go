package endpoint

import (
	"fmt"
	"strings"
	"testing"
)

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

// TestOutputSmallAndLargeInOrder: lines that the producer's goroutine
// writes to an idle connection itself, between bursts that go through the
// pump and the writer, on two channels: every byte arrives once and in
// order (collect checks each frame's offset). The output stays within
// the default window: collect does not acknowledge.
func TestOutputSmallAndLargeInOrder(t *testing.T) {
	a := newTestAgent(t)
	rc := a.dial(t)
	script := `i=0; while [ $i -lt 200 ]; do echo "line $i"; echo "err $i" >&2
if [ $((i % 8)) = 0 ]; then head -c 30000 /dev/zero | tr '\0' x; echo "after $i"; fi
if [ $((i % 3)) = 0 ]; then sleep 0.001; fi; i=$((i+1)); done`
	id := resultStream(t, rc.call(map[string]any{"op": "exec", "argv": []string{"sh", "-c", script}}))
	out, end := rc.collect(id)
	var wantOut, wantErr strings.Builder
	for i := range 200 {
		fmt.Fprintf(&wantOut, "line %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
		if i%8 == 0 {
			fmt.Fprintf(&wantOut, "%safter %d\n", strings.Repeat("x", 30000), i)
		}
	}
	if string(out["stdout"]) != wantOut.String() {
		t.Errorf("stdout: %d bytes, want the %d written, in order", len(out["stdout"]), wantOut.Len())
	}
	if string(out["stderr"]) != wantErr.String() {
		t.Errorf("stderr %q, want %q", out["stderr"], wantErr.String())
	}
	if end["reason"] != "exit" || end["exit_code"].(float64) != 0 {
		t.Fatalf("end %v", end)
	}
}
