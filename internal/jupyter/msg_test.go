package jupyter

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// TestMsgFraming: a message survives Encode and DecodeMsg part for part,
// buffers included; an empty part is sent as {}; a broken frame is
// ErrFrame; the JSON form carries the buffers in base64 both ways.
func TestMsgFraming(t *testing.T) {
	m := Msg{Channel: "iopub", Header: json.RawMessage(`{"msg_type":"display_data"}`), Content: json.RawMessage(`{"data":{}}`),
		Buffers: [][]byte{{0, 1, 2}, {}, []byte("xyz")}}
	got, err := DecodeMsg(m.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Channel != "iopub" || string(got.Header) != string(m.Header) || string(got.Parent) != "{}" ||
		string(got.Metadata) != "{}" || string(got.Content) != string(m.Content) || len(got.Buffers) != 3 ||
		!bytes.Equal(got.Buffers[0], []byte{0, 1, 2}) || len(got.Buffers[1]) != 0 || string(got.Buffers[2]) != "xyz" {
		t.Fatalf("decoded %+v", got)
	}
	frame := m.Encode()
	for _, bad := range [][]byte{nil, frame[:7], frame[:len(frame)-1], append(append([]byte{}, frame[:8]...), make([]byte, 64)...)} {
		if _, err := DecodeMsg(bad); !errors.Is(err, ErrFrame) {
			t.Errorf("a broken frame of %d bytes: %v", len(bad), err)
		}
	}
	notJSON := Msg{Channel: "shell", Header: json.RawMessage(`[1]`)}.Encode()
	if _, err := DecodeMsg(notJSON); !errors.Is(err, ErrFrame) {
		t.Errorf("a header that is not an object: %v", err)
	}
	js, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Msg
	if err := json.Unmarshal(js, &back); err != nil || len(back.Buffers) != 3 || string(back.Buffers[2]) != "xyz" || !bytes.Contains(js, []byte(`"AAEC"`)) {
		t.Fatalf("JSON %s, back %+v, %v", js, back, err)
	}
}
