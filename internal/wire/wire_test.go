package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestDataRoundTrip(t *testing.T) {
	cases := []Data{
		{Type: Out, Stream: 1, Channel: ChanStdout, Offset: 0, Payload: []byte("hello")},
		{Type: Out, Stream: 1 << 40, Channel: ChanStderr, Offset: 1 << 50, Payload: []byte{}},
		{Type: Out, Stream: 300, Channel: ChanPTY, Offset: 127, Payload: bytes.Repeat([]byte{0xff}, 1000)},
		{Type: Out, Stream: 301, Channel: ChanData, Offset: 1 << 30, Payload: []byte("file")},
		{Type: In, Stream: 9, Channel: ChanInput, Payload: []byte("input\n")},
		{Type: InAt, Stream: 9, Channel: ChanInput, Offset: 12, Payload: []byte("input\n")},
	}
	for _, c := range cases {
		enc := AppendData(nil, c)
		got, err := DecodeData(enc)
		if err != nil {
			t.Fatalf("decode %+v: %v", c, err)
		}
		if got.Type != c.Type || got.Stream != c.Stream || got.Channel != c.Channel ||
			got.Offset != c.Offset || !bytes.Equal(got.Payload, c.Payload) {
			t.Fatalf("round trip: got %+v want %+v", got, c)
		}
	}
}

func TestOutHeaderMatchesAppendData(t *testing.T) {
	d := Data{Type: Out, Stream: 77, Channel: ChanStderr, Offset: 123456, Payload: []byte("x")}
	want := AppendData(nil, d)
	got := append(AppendOutHeader(nil, 77, ChanStderr, 123456), 'x')
	if !bytes.Equal(got, want) {
		t.Fatalf("header %x, want %x", got, want)
	}
}

func TestDecodeDataErrors(t *testing.T) {
	big := AppendData(nil, Data{Type: In, Stream: 1, Payload: make([]byte, MaxPayload+1)})
	cases := []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"two bytes", []byte{0x02, 0x01}, ErrShort},
		{"bad type", []byte{0x07, 0x01, 0x00}, ErrFrameType},
		{"in on stdout", []byte{0x02, 0x01, 0x01}, ErrChannel},
		{"out on input", []byte{0x01, 0x01, 0x00, 0x00}, ErrChannel},
		{"out on an unknown channel", []byte{0x01, 0x01, 0x05, 0x00}, ErrChannel},
		{"out missing offset", []byte{0x01, 0x01, 0x01}, ErrVarint},
		{"varint overflow", []byte{0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00}, ErrVarint},
		{"too large", big, ErrTooLarge},
	}
	for _, c := range cases {
		if _, err := DecodeData(c.msg); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func TestDecodeRequest(t *testing.T) {
	r, err := DecodeRequest([]byte(` {"id": 7, "op": "exec", "argv": ["true"]}`))
	if err != nil || r.ID != 7 || !r.HasID || r.Op != "exec" {
		t.Fatalf("got %+v, %v", r, err)
	}
	var p struct {
		Envelope
		Argv []string `json:"argv"`
	}
	if err := r.Params(&p); err != nil || len(p.Argv) != 1 {
		t.Fatalf("params: %+v %v", p, err)
	}
	var strict struct{ Envelope }
	if err := r.Params(&strict); err == nil {
		t.Fatal("unknown parameter argv was accepted")
	}
}

func TestDecodeRequestOpID(t *testing.T) {
	for _, id := range []string{"a", "0f8fad5b-d9cb-469f-a165-70867728950e", "c1:42", "x_y.z", strings.Repeat("Z", MaxOpID)} {
		r, err := DecodeRequest([]byte(`{"id": 1, "op": "exec", "op_id": "` + id + `", "instance": "i9"}`))
		if err != nil || r.OpID != id || r.Instance != "i9" || !r.HasInstance {
			t.Errorf("op_id %q: got %+v, %v", id, r, err)
		}
		var p struct{ Envelope }
		if err := r.Params(&p); err != nil {
			t.Errorf("op_id %q: params: %v", id, err)
		}
	}
	r, err := DecodeRequest([]byte(`{"id": 1, "op": "exec"}`))
	if err != nil || r.OpID != "" || r.HasInstance {
		t.Errorf("no op_id: got %+v, %v", r, err)
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	cases := []struct {
		msg   string
		hasID bool
		code  Code
	}{
		{``, false, CodeBadRequest},
		{`[1,2]`, false, CodeBadRequest},
		{`{"id": 3`, false, CodeBadRequest},
		{`{"id": -1, "op": "x"}`, false, CodeBadRequest},
		{`{"id": "a", "op": "x"}`, false, CodeBadRequest},
		{`{"id": 4}`, true, CodeBadRequest},
		{`{"id": 5, "op": ""}`, true, CodeBadRequest},
		{`{"id": 6, "op": "exec", "op_id": ""}`, true, CodeBadRequest},
		{`{"id": 6, "op": "exec", "op_id": "` + strings.Repeat("a", MaxOpID+1) + `"}`, true, CodeBadRequest},
		{`{"id": 6, "op": "exec", "op_id": "a b"}`, true, CodeBadRequest},
		{`{"id": 6, "op": "exec", "op_id": "caf\u00e9"}`, true, CodeBadRequest},
		{`{"id": 6, "op": "exec", "op_id": 7}`, true, CodeBadRequest},
		{`{"id": 6, "op": "exec", "instance": 7}`, true, CodeBadRequest},
	}
	for _, c := range cases {
		r, err := DecodeRequest([]byte(c.msg))
		if err == nil {
			t.Errorf("%q: no error", c.msg)
			continue
		}
		if r.HasID != c.hasID || AsError(err).Code != c.code {
			t.Errorf("%q: hasID %v code %s, want %v %s", c.msg, r.HasID, AsError(err).Code, c.hasID, c.code)
		}
	}
	if _, err := DecodeRequest(bytes.Repeat([]byte(" "), MaxControl+1)); AsError(err).Code != CodeLimit {
		t.Errorf("oversized control frame: %v", err)
	}
}

func TestResponses(t *testing.T) {
	b, _ := Response(3, nil)
	if string(b) != `{"id":3,"result":{}}` {
		t.Fatalf("empty result: %s", b)
	}
	b = ErrorResponse(4, Errorf(CodeNotFound, "no stream %d", 12))
	m, err := DecodeMessage(b)
	if err != nil || *m.ID != 4 || m.Error.Code != CodeNotFound || m.Error.Message != "no stream 12" {
		t.Fatalf("%s -> %+v %v", b, m, err)
	}
	m, err = DecodeMessage(ErrorEvent(Errorf(CodeBadRequest, "x")))
	if err != nil || m.Event != "error" || m.Error.Code != CodeBadRequest {
		t.Fatalf("error event: %+v %v", m, err)
	}
	if _, err := DecodeMessage([]byte(`{"x":1}`)); err == nil {
		t.Fatal("frame without id or event accepted")
	}
	if AsError(errors.New("boom")).Code != CodeInternal {
		t.Fatal("plain error not internal")
	}
	var raw map[string]any
	_ = json.Unmarshal(b, &raw)
}
