package jupyter

import (
	"errors"
	"testing"
)

func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	s := newSigner("secret")
	m, err := newMessage("session", "execute_request", nil, map[string]string{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	m.Buffers = [][]byte{[]byte("buf")}
	frames := s.encode(m)
	// A ROUTER or PUB puts identities or a topic before the delimiter.
	got, err := s.decode(append([][]byte{[]byte("identity")}, frames...))
	if err != nil {
		t.Fatal(err)
	}
	if got.MsgID != m.MsgID || got.MsgType != "execute_request" || got.ParentID != "" || string(got.Content) != `{"code":"1"}` || len(got.Buffers) != 1 {
		t.Fatalf("decoded %+v", got)
	}

	tests := []struct {
		name   string
		frames func() [][]byte
		want   error
	}{
		{"tampered content", func() [][]byte {
			f := s.encode(m)
			f[5] = []byte(`{"code":"import os"}`)
			return f
		}, errBadSignature},
		{"other key", func() [][]byte { return newSigner("other").encode(m) }, errBadSignature},
		{"signature not hex", func() [][]byte {
			f := s.encode(m)
			f[1] = []byte("zz")
			return f
		}, errBadSignature},
		{"no delimiter", func() [][]byte { return s.encode(m)[1:] }, errMalformed},
		{"too few frames", func() [][]byte { return s.encode(m)[:4] }, errMalformed},
		{"header not JSON", func() [][]byte {
			f := s.encode(&message{Header: []byte("x"), Parent: []byte("{}"), Metadata: []byte("{}"), Content: []byte("{}")})
			return f
		}, errMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.decode(tc.frames()); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}
