package jupyterapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/rayito/rayito-agent/internal/jupyter"
)

func sampleMsg(buffers ...[]byte) jupyter.Msg {
	return jupyter.Msg{
		Channel:  "shell",
		Header:   json.RawMessage(`{"msg_id":"1","msg_type":"kernel_info_request","session":"s","username":"u","version":"5.3"}`),
		Parent:   json.RawMessage(`{}`),
		Metadata: json.RawMessage(`{}`),
		Content:  json.RawMessage(`{}`),
		Buffers:  buffers,
	}
}

func TestV1Layout(t *testing.T) {
	m := sampleMsg()
	b := m.Encode()
	// As @jupyterlab/services writes a kernel_info_request: six offsets,
	// the channel right after them, the last one the frame's length.
	offs := make([]uint64, binary.LittleEndian.Uint64(b))
	for i := range offs {
		offs[i] = binary.LittleEndian.Uint64(b[8*(1+i):])
	}
	want := []uint64{56, 61, 61 + uint64(len(m.Header)), 63 + uint64(len(m.Header)), 65 + uint64(len(m.Header)), 67 + uint64(len(m.Header))}
	if !reflect.DeepEqual(offs, want) || offs[5] != uint64(len(b)) {
		t.Fatalf("offsets %v, want %v (frame %d bytes)", offs, want, len(b))
	}
}

func TestFramingRoundTrips(t *testing.T) {
	for _, m := range []jupyter.Msg{sampleMsg(), sampleMsg([]byte{0, 1, 2}, nil, []byte("buf"))} {
		got, err := jupyter.DecodeMsg(m.Encode())
		if err != nil {
			t.Fatal(err)
		}
		if !sameMsg(got, m) {
			t.Fatalf("v1: %+v, want %+v", got, m)
		}
		frame, bin, err := encodeLegacy(m)
		if err != nil || bin != (len(m.Buffers) > 0) {
			t.Fatalf("legacy: binary %v, err %v", bin, err)
		}
		if got, err = decodeLegacy(frame, bin); err != nil {
			t.Fatal(err)
		}
		if !sameMsg(got, m) {
			t.Fatalf("legacy: %+v, want %+v", got, m)
		}
	}
}

func sameMsg(a, b jupyter.Msg) bool {
	if a.Channel != b.Channel || len(a.Buffers) != len(b.Buffers) {
		return false
	}
	for _, p := range [][2][]byte{{a.Header, b.Header}, {a.Parent, b.Parent}, {a.Metadata, b.Metadata}, {a.Content, b.Content}} {
		var x, y any
		json.Unmarshal(p[0], &x)
		json.Unmarshal(p[1], &y)
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	for i := range a.Buffers {
		if !bytes.Equal(a.Buffers[i], b.Buffers[i]) {
			return false
		}
	}
	return true
}

func TestMalformedFrames(t *testing.T) {
	good := sampleMsg().Encode()
	put := func(b []byte, at int, v uint64) []byte {
		b = bytes.Clone(b)
		binary.LittleEndian.PutUint64(b[at:], v)
		return b
	}
	for name, b := range map[string][]byte{
		"empty":             nil,
		"short":             {1, 2, 3},
		"too few offsets":   put(good, 0, 3),
		"too many offsets":  put(good, 0, 1<<40),
		"offset before end": put(good, 8, 8),
		"offset past end":   put(good, 16, 1<<20),
		"offsets backwards": put(good, 24, 57),
		"header not JSON":   v1With("shell", "nope"),
		"header an array":   v1With("shell", "[]"),
	} {
		if _, err := jupyter.DecodeMsg(b); err == nil {
			t.Errorf("v1 %s: decoded", name)
		}
	}
	legacyBin, _, _ := encodeLegacy(sampleMsg([]byte("x")))
	for name, tc := range map[string]struct {
		b   []byte
		bin bool
	}{
		"text not JSON":     {[]byte("{"), false},
		"binary short":      {[]byte{0, 0}, true},
		"binary no parts":   {[]byte{0, 0, 0, 0, 0, 0, 0, 0}, true},
		"binary many parts": {append([]byte{0, 0, 1, 0}, legacyBin[4:]...), true},
		"binary bad offset": {append(append([]byte(nil), legacyBin[:8]...), append([]byte{0xff, 0, 0, 0}, legacyBin[12:]...)...), true},
	} {
		if _, err := decodeLegacy(tc.b, tc.bin); err == nil {
			t.Errorf("legacy %s: decoded", name)
		}
	}
}

func v1With(channel, header string) []byte {
	m := sampleMsg()
	m.Channel, m.Header = channel, json.RawMessage(header)
	return m.Encode()
}

func FuzzDecodeFrames(f *testing.F) {
	f.Add(sampleMsg([]byte("b")).Encode())
	legacy, _, _ := encodeLegacy(sampleMsg([]byte("b")))
	f.Add(legacy)
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := jupyter.DecodeMsg(b); err == nil {
			if _, err := jupyter.DecodeMsg(m.Encode()); err != nil {
				t.Fatalf("re-encoded v1 frame does not decode: %v", err)
			}
		}
		decodeLegacy(b, true)
		decodeLegacy(b, false)
	})
}
