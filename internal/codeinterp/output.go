package codeinterp

import (
	"encoding/json"
	"strings"

	"github.com/rayito/rayito-agent/internal/jupyter"
)

// Output lines of /execute, one JSON object per line.
type (
	textLine struct {
		Type string `json:"type"` // stdout or stderr
		Text string `json:"text"`
	}
	errorLine struct {
		Type      string `json:"type"` // error
		Name      string `json:"name"`
		Value     string `json:"value"`
		Traceback string `json:"traceback"`
	}
	countLine struct {
		Type           string `json:"type"` // number_of_executions
		ExecutionCount int    `json:"execution_count"`
	}
	markerLine struct {
		Type string `json:"type"` // keepalive, end_of_execution
	}
)

// mimeFields are the result fields E2B fills from a MIME bundle; any other
// type goes into extra, keyed by its MIME type.
var mimeFields = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// resultLine turns a MIME bundle into a result line. execute_result is the
// main result; display_data is not.
func resultLine(data map[string]json.RawMessage, main bool) map[string]any {
	line := map[string]any{"type": "result", "is_main_result": main}
	extra := map[string]json.RawMessage{}
	for mime, v := range data {
		field, ok := mimeFields[mime]
		if !ok {
			extra[mime] = v
			continue
		}
		if field == "text" {
			var text string
			if json.Unmarshal(v, &text) == nil {
				// E2B shows a string result without the quotes of its repr.
				if len(text) >= 2 && text[0] == '\'' && text[len(text)-1] == '\'' {
					text = text[1 : len(text)-1]
				}
				line[field] = text
				continue
			}
		}
		line[field] = v
	}
	if len(extra) > 0 {
		line["extra"] = extra
	}
	return line
}

// eventLine translates one cell event; ok is false for events this API
// has no line for.
func eventLine(ev jupyter.CellEvent) (line any, ok bool) {
	switch ev.Type {
	case jupyter.CellStdout, jupyter.CellStderr:
		return textLine{Type: ev.Type, Text: ev.Text}, true
	case jupyter.CellResult:
		return resultLine(ev.Data, ev.Main), true
	case jupyter.CellDisplay:
		return resultLine(ev.Data, false), true
	case jupyter.CellError:
		return errorLine{Type: "error", Name: ev.Name, Value: ev.Value, Traceback: strings.Join(ev.Traceback, "\n")}, true
	}
	return nil, false
}
