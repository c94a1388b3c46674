package wire

import (
	"errors"
	"strings"
	"testing"
)

// TestParamsErrorsInClientTerms: a parameter of the wrong type is named
// with the JSON type it needs, never with the agent's Go names.
func TestParamsErrorsInClientTerms(t *testing.T) {
	var p struct {
		Envelope
		TimeoutMs int64             `json:"timeout_ms"`
		Argv      []string          `json:"argv"`
		Env       map[string]string `json:"env"`
		Stdin     bool              `json:"stdin"`
		Window    *uint64           `json:"window"`
	}
	for frame, want := range map[string]string{
		`{"id":1,"op":"exec","timeout_ms":"5"}`: "exec: bad parameters: timeout_ms must be a whole number, not a string",
		`{"id":1,"op":"exec","timeout_ms":1.5}`: "exec: bad parameters: timeout_ms must be a whole number, not a number 1.5",
		`{"id":1,"op":"exec","argv":"ls"}`:      "exec: bad parameters: argv must be an array, not a string",
		`{"id":1,"op":"exec","env":[]}`:         "exec: bad parameters: env must be an object, not an array",
		`{"id":1,"op":"exec","stdin":1}`:        "exec: bad parameters: stdin must be true or false, not a number",
		`{"id":1,"op":"exec","window":-1}`:      "exec: bad parameters: window must be a whole number from 0, not a number -1",
		`{"id":1,"op":"exec","bogus":1}`:        `exec: bad parameters: unknown field "bogus"`,
		// Whole numbers the field cannot hold are out of range, not of
		// the wrong kind.
		`{"id":1,"op":"exec","timeout_ms":99999999999999999999}`:  "exec: bad parameters: timeout_ms is out of range: 99999999999999999999",
		`{"id":1,"op":"exec","timeout_ms":-99999999999999999999}`: "exec: bad parameters: timeout_ms is out of range: -99999999999999999999",
		`{"id":1,"op":"exec","window":18446744073709551616}`:      "exec: bad parameters: window is out of range: 18446744073709551616",
		`{"id":1,"op":"exec","timeout_ms":1e30}`:                  "exec: bad parameters: timeout_ms must be a whole number, not a number 1e30",
	} {
		r, err := DecodeRequest([]byte(frame))
		if err != nil {
			t.Fatal(err)
		}
		err = r.Params(&p)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeBadRequest || e.Message != want {
			t.Errorf("%s: %v, want bad_request %q", frame, err, want)
		}
		if e != nil && (strings.Contains(e.Message, "Go ") || strings.Contains(e.Message, "int64") || strings.Contains(e.Message, "TimeoutMs")) {
			t.Errorf("%s: message shows Go names: %s", frame, e.Message)
		}
	}
}
