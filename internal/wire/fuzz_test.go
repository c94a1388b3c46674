package wire

import (
	"bytes"
	"testing"
)

// FuzzDecodeData checks that decoding never panics and that whatever decodes
// re-encodes to the same bytes.
func FuzzDecodeData(f *testing.F) {
	f.Add(AppendData(nil, Data{Type: Out, Stream: 1, Channel: ChanStdout, Offset: 5, Payload: []byte("hi")}))
	f.Add(AppendData(nil, Data{Type: In, Stream: 300, Channel: ChanInput, Payload: []byte("x")}))
	f.Add(AppendData(nil, Data{Type: InAt, Stream: 7, Channel: ChanInput, Offset: 1 << 40, Payload: []byte("at")}))
	f.Add([]byte{0x01, 0x80})
	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := DecodeData(msg)
		if err != nil {
			return
		}
		again := AppendData(nil, d)
		d2, err := DecodeData(again)
		if err != nil || d2.Stream != d.Stream || d2.Offset != d.Offset || d2.Channel != d.Channel || !bytes.Equal(d2.Payload, d.Payload) {
			t.Fatalf("re-encode of %x differs: %x (%v)", msg, again, err)
		}
	})
}

// FuzzDecodeRequest checks that no control frame panics the decoder and that
// an accepted frame always has an op.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"id":1,"op":"exec","argv":["true"]}`))
	f.Add([]byte(`{"id":18446744073709551615,"op":"ack"}`))
	f.Add([]byte(`{"op":1}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		r, err := DecodeRequest(msg)
		if err == nil && r.Op == "" {
			t.Fatalf("accepted %q without op", msg)
		}
	})
}
