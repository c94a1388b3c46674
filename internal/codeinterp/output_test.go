package codeinterp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
)

func TestResultLine(t *testing.T) {
	data := map[string]json.RawMessage{
		"text/plain":       json.RawMessage(`"'quoted'"`),
		"text/html":        json.RawMessage(`"<b>x</b>"`),
		"image/png":        json.RawMessage(`"iVBOR"`),
		"application/json": json.RawMessage(`{"a":1}`),
		"e2b/chart":        json.RawMessage(`{"type":"line"}`),
		"application/x-my": json.RawMessage(`"custom"`),
	}
	b, _ := json.Marshal(resultLine(data, true))
	var got map[string]any
	json.Unmarshal(b, &got)
	want := map[string]any{
		"type": "result", "is_main_result": true, "text": "quoted", "html": "<b>x</b>", "png": "iVBOR",
		"json": map[string]any{"a": 1.0}, "chart": map[string]any{"type": "line"},
		"extra": map[string]any{"application/x-my": "custom"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %s", b)
	}
	for in, want := range map[string]string{`"'"`: "'", `"''"`: "", `"\"dq\""`: `"dq"`, `"it's"`: "it's"} {
		b, _ := json.Marshal(resultLine(map[string]json.RawMessage{"text/plain": json.RawMessage(in)}, false))
		var l struct{ Text string }
		json.Unmarshal(b, &l)
		if l.Text != want {
			t.Errorf("text/plain %s: %q, want %q", in, l.Text, want)
		}
	}
}

func TestEndLines(t *testing.T) {
	three := 3
	for _, tc := range []struct {
		name    string
		end     stream.End
		errored bool
		want    string
	}{
		{"ok", stream.End{Reason: stream.ReasonDone, Status: jupyter.StatusOK, ExecutionCount: &three}, false, "number_of_executions,end_of_execution"},
		{"error shown", stream.End{Reason: stream.ReasonDone, Status: jupyter.StatusError, ExecutionCount: &three}, true, "number_of_executions,end_of_execution"},
		{"restarted", stream.End{Reason: stream.ReasonDone, Status: jupyter.StatusError, Message: "kernel k1 was restarted while the cell ran"}, false, "error:ExecutionError,end_of_execution"},
		{"aborted", stream.End{Reason: stream.ReasonDone, Status: jupyter.StatusAborted}, false, "error:ExecutionAborted,end_of_execution"},
		{"shut down", stream.End{Reason: stream.ReasonClosed, Message: "kernel k1 was shut down"}, false, "error:ContextShutDown,end_of_execution"},
		{"resumed", stream.End{Reason: stream.ReasonResume, Message: "resumed"}, false, "error:SandboxResumed"},
	} {
		var got []string
		for _, l := range endLines(tc.end, tc.errored) {
			b, _ := json.Marshal(l)
			var v struct{ Type, Name, Value string }
			json.Unmarshal(b, &v)
			if v.Type == "error" {
				if v.Value == "" {
					t.Errorf("%s: error line without a value", tc.name)
				}
				v.Type += ":" + v.Name
			}
			got = append(got, v.Type)
		}
		if g := strings.Join(got, ","); g != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, g, tc.want)
		}
	}
}
