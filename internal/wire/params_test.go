package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
)

type pathParams struct {
	Envelope
	Path string `json:"path"`
}

// TestParamsAfterBadRequests: decoders are reused, so each request after
// one that failed (a syntax error, an unknown or mistyped field, a value
// cut short) or that carried more than one value must still get exactly
// its own parameters.
func TestParamsAfterBadRequests(t *testing.T) {
	bad := []string{
		`{"op":"x","path":`,
		`{"op":"x","nope":1}`,
		`{"op":"x","path":7}`,
		`{"op":"x","path":"first"} {"op":"x","path":"second"}`,
		`{"op":"x","path":"a"}}`,
		`nul`,
	}
	for i := range 200 {
		raw := bad[i%len(bad)]
		var p pathParams
		Request{Op: "x", Raw: json.RawMessage(raw)}.Params(&p)
		want := fmt.Sprintf("/good/%d", i)
		var q pathParams
		if err := (Request{Op: "x", Raw: json.RawMessage(`{"op":"x","path":"` + want + `"}`)}).Params(&q); err != nil || q.Path != want {
			t.Fatalf("after %s: got %+v, %v; want path %s", raw, q, err, want)
		}
	}
}

// TestParamsConcurrent decodes from many goroutines at once (run with
// -race): each gets its own values.
func TestParamsConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				want := fmt.Sprintf("/%d/%d", g, i)
				var p pathParams
				if err := (Request{Op: "x", Raw: json.RawMessage(`{"path":"` + want + `"}`)}).Params(&p); err != nil || p.Path != want {
					t.Errorf("got %+v, %v; want %s", p, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkParams decodes a file op's parameters: through the kept
// decoders (Params), and through a new json.Decoder each time (Params
// until 2026-12-02).
func BenchmarkParams(b *testing.B) {
	raw := json.RawMessage(`{"op":"file_stat","id":12,"path":"/tmp/x/f","user":"nobody"}`)
	var p struct {
		pathParams
		User string `json:"user"`
	}
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := (Request{Op: "file_stat", Raw: raw}).Params(&p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
