package jupyter

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Msg is a Jupyter message as clients exchange it with jupyter_server: a
// channel name, the four JSON parts and the binary buffers.
type Msg struct {
	Channel  string
	Header   json.RawMessage
	Parent   json.RawMessage
	Metadata json.RawMessage
	Content  json.RawMessage
	Buffers  [][]byte
}

// msgParts is the number of parts before the buffers.
const msgParts = 5

// ErrFrame is a message frame that cannot be decoded.
var ErrFrame = errors.New("jupyter: malformed message frame")

// Encode is m in jupyter_server's v1 kernel websocket framing
// (docs/developers/websocket-protocols.rst there): a count n of u64
// little-endian offsets, the offsets, then the channel, the four JSON
// parts and the buffers; offset i starts part i and the last offset is
// the frame's length. A relay's stream holds its messages so: a v1
// websocket sends them as they are, and nothing is base64 until a
// JSON surface asks (AppendJSON).
func (m Msg) Encode() []byte {
	parts := [...][]byte{[]byte(m.Channel), orEmptyObject(m.Header), orEmptyObject(m.Parent), orEmptyObject(m.Metadata), orEmptyObject(m.Content)}
	n := len(parts) + len(m.Buffers) + 1
	size := 8 * (1 + n)
	for _, p := range parts {
		size += len(p)
	}
	for _, p := range m.Buffers {
		size += len(p)
	}
	out := make([]byte, 8*(1+n), size)
	binary.LittleEndian.PutUint64(out, uint64(n))
	off := uint64(8 * (1 + n))
	i := 1
	put := func(p []byte) {
		binary.LittleEndian.PutUint64(out[8*i:], off)
		off += uint64(len(p))
		i++
	}
	for _, p := range parts {
		put(p)
	}
	for _, p := range m.Buffers {
		put(p)
	}
	binary.LittleEndian.PutUint64(out[8*n:], off)
	for _, p := range parts {
		out = append(out, p...)
	}
	for _, p := range m.Buffers {
		out = append(out, p...)
	}
	return out
}

// DecodeMsg splits a frame in Encode's framing (a v1 websocket frame).
// The parts are slices of b. The JSON parts are checked to be objects
// (jupyter_server would fail to parse anything else).
func DecodeMsg(b []byte) (Msg, error) {
	if len(b) < 8 {
		return Msg{}, fmt.Errorf("%w: %d bytes", ErrFrame, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n < msgParts+1 || n > uint64(len(b))/8-1 {
		return Msg{}, fmt.Errorf("%w: %d offsets in %d bytes", ErrFrame, n, len(b))
	}
	offs := make([]uint64, n)
	for i := range offs {
		offs[i] = binary.LittleEndian.Uint64(b[8*(1+i):])
		if offs[i] < 8*(1+n) || offs[i] > uint64(len(b)) || (i > 0 && offs[i] < offs[i-1]) {
			return Msg{}, fmt.Errorf("%w: offset %d is %d", ErrFrame, i, offs[i])
		}
	}
	part := func(i int) []byte { return b[offs[i]:offs[i+1]:offs[i+1]] }
	m := Msg{Channel: string(part(0))}
	for i, dst := range []*json.RawMessage{&m.Header, &m.Parent, &m.Metadata, &m.Content} {
		p := part(1 + i)
		if !isObject(p) {
			return Msg{}, fmt.Errorf("%w: part %d is not a JSON object", ErrFrame, 1+i)
		}
		*dst = json.RawMessage(p)
	}
	for i := msgParts; i < int(n)-1; i++ {
		m.Buffers = append(m.Buffers, part(i))
	}
	return m, nil
}

// jsonMsg is a message as JSON clients see it (the native protocol's
// `msg`, jupyter_server's legacy framing): buffers as base64.
type jsonMsg struct {
	Channel  string          `json:"channel"`
	Header   json.RawMessage `json:"header"`
	Parent   json.RawMessage `json:"parent_header"`
	Metadata json.RawMessage `json:"metadata"`
	Content  json.RawMessage `json:"content"`
	Buffers  []string        `json:"buffers,omitempty"`
}

// MarshalJSON is m as JSON clients see it, buffers in base64.
func (m Msg) MarshalJSON() ([]byte, error) {
	out := jsonMsg{Channel: m.Channel, Header: orEmptyObject(m.Header), Parent: orEmptyObject(m.Parent),
		Metadata: orEmptyObject(m.Metadata), Content: orEmptyObject(m.Content)}
	for _, b := range m.Buffers {
		out.Buffers = append(out.Buffers, base64.StdEncoding.EncodeToString(b))
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads m as JSON clients send it, buffers in base64.
func (m *Msg) UnmarshalJSON(b []byte) error {
	var in jsonMsg
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*m = Msg{Channel: in.Channel, Header: in.Header, Parent: in.Parent, Metadata: in.Metadata, Content: in.Content}
	for i, s := range in.Buffers {
		buf, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("buffers[%d] is not base64: %v", i, err)
		}
		m.Buffers = append(m.Buffers, buf)
	}
	return nil
}

func isObject(p []byte) bool {
	p = bytes.TrimSpace(p)
	return len(p) >= 2 && p[0] == '{' && json.Valid(p)
}

func orEmptyObject(p json.RawMessage) json.RawMessage {
	if len(p) == 0 || string(p) == "null" {
		return json.RawMessage("{}")
	}
	return p
}
