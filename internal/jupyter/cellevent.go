package jupyter

import (
	"encoding/json"
	"fmt"
)

// Cell event types: the `type` of a cell stream's events (protocol
// section 6).
const (
	CellStdout       = "stdout"
	CellStderr       = "stderr"
	CellResult       = "result"
	CellDisplay      = "display"
	CellError        = "error"
	CellInputRequest = "input_request"
)

// Cell event bodies as a cell stream holds them, one type per event so
// each encodes exactly the protocol's fields; the native protocol sends
// them inside its envelope (`{"event": "cell", "stream", "seq", ...}`).
type (
	textEvent struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	resultEvent struct {
		Type           string          `json:"type"`
		Main           bool            `json:"main"`
		Data           json.RawMessage `json:"data"`
		ExecutionCount *int            `json:"execution_count"`
	}
	displayEvent struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	errorEvent struct {
		Type      string   `json:"type"`
		Name      string   `json:"name"`
		Value     string   `json:"value"`
		Traceback []string `json:"traceback"`
	}
	inputEvent struct {
		Type     string `json:"type"`
		Prompt   string `json:"prompt"`
		Password bool   `json:"password"`
	}
)

// CellEvent is one event of a cell stream, whichever its type: the
// fields its type has are set.
type CellEvent struct {
	Type string `json:"type"`
	// Text of stdout and stderr.
	Text string `json:"text"`
	// Main, Data and ExecutionCount of a result (Data of a display too):
	// a MIME bundle.
	Main           bool                       `json:"main"`
	Data           map[string]json.RawMessage `json:"data"`
	ExecutionCount *int                       `json:"execution_count"`
	// Name, Value and Traceback of an error.
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
	// Prompt and Password of an input request.
	Prompt   string `json:"prompt"`
	Password bool   `json:"password"`
}

// DecodeCellEvent reads one event of a cell stream.
func DecodeCellEvent(b []byte) (CellEvent, error) {
	var e CellEvent
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("jupyter: cell event: %w", err)
	}
	return e, nil
}
