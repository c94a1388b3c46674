package jupyterapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rayito/rayito-agent/internal/jupyter"
)

// v1Protocol is the kernel websocket subprotocol of jupyter_server 1.23+
// (docs/developers/websocket-protocols.rst there): binary frames holding a
// count n of u64 little-endian offsets, the offsets, then the channel, the
// four JSON parts and the buffers; offset i starts part i and the last
// offset is the frame's length.
const v1Protocol = "v1.kernel.websocket.jupyter.org"

// v1Parts is the number of parts before the buffers.
const v1Parts = 5

var errFrame = errors.New("jupyterapi: malformed frame")

// encodeV1 builds a v1 frame.
func encodeV1(m jupyter.Msg) []byte {
	parts := [][]byte{[]byte(m.Channel), orEmptyObject(m.Header), orEmptyObject(m.Parent), orEmptyObject(m.Metadata), orEmptyObject(m.Content)}
	parts = append(parts, m.Buffers...)
	n := len(parts) + 1
	size := 8 * (1 + n)
	for _, p := range parts {
		size += len(p)
	}
	out := make([]byte, 8*(1+n), size)
	binary.LittleEndian.PutUint64(out, uint64(n))
	off := uint64(8 * (1 + n))
	for i, p := range parts {
		binary.LittleEndian.PutUint64(out[8*(1+i):], off)
		off += uint64(len(p))
	}
	binary.LittleEndian.PutUint64(out[8*n:], off)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// decodeV1 splits a v1 frame. The JSON parts are checked to be objects
// (jupyter_server would fail to parse anything else).
func decodeV1(b []byte) (jupyter.Msg, error) {
	if len(b) < 8 {
		return jupyter.Msg{}, fmt.Errorf("%w: %d bytes", errFrame, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n < v1Parts+1 || n > uint64(len(b))/8-1 {
		return jupyter.Msg{}, fmt.Errorf("%w: %d offsets in %d bytes", errFrame, n, len(b))
	}
	offs := make([]uint64, n)
	for i := range offs {
		offs[i] = binary.LittleEndian.Uint64(b[8*(1+i):])
		if offs[i] < 8*(1+n) || offs[i] > uint64(len(b)) || (i > 0 && offs[i] < offs[i-1]) {
			return jupyter.Msg{}, fmt.Errorf("%w: offset %d is %d", errFrame, i, offs[i])
		}
	}
	part := func(i int) []byte { return b[offs[i]:offs[i+1]] }
	m := jupyter.Msg{Channel: string(part(0))}
	for i, dst := range []*json.RawMessage{&m.Header, &m.Parent, &m.Metadata, &m.Content} {
		p := part(1 + i)
		if !isObject(p) {
			return jupyter.Msg{}, fmt.Errorf("%w: part %d is not a JSON object", errFrame, 1+i)
		}
		*dst = json.RawMessage(p)
	}
	for i := v1Parts; i < int(n)-1; i++ {
		m.Buffers = append(m.Buffers, part(i))
	}
	return m, nil
}

// legacyMsg is a message in jupyter_server's legacy JSON framing: the
// whole message as one object, channel included.
type legacyMsg struct {
	Channel  string          `json:"channel"`
	Header   json.RawMessage `json:"header"`
	Parent   json.RawMessage `json:"parent_header"`
	Metadata json.RawMessage `json:"metadata"`
	Content  json.RawMessage `json:"content"`
}

// encodeLegacy builds a legacy frame: JSON text, or, for a message with
// buffers, a binary frame of a u32 big-endian count of parts, their u32
// big-endian offsets, the JSON and the buffers.
func encodeLegacy(m jupyter.Msg) (frame []byte, binaryFrame bool, err error) {
	js, err := json.Marshal(legacyMsg{
		Channel: m.Channel, Header: orEmptyObject(m.Header), Parent: orEmptyObject(m.Parent),
		Metadata: orEmptyObject(m.Metadata), Content: orEmptyObject(m.Content),
	})
	if err != nil || len(m.Buffers) == 0 {
		return js, false, err
	}
	parts := append([][]byte{js}, m.Buffers...)
	head := 4 * (1 + len(parts))
	out := make([]byte, head)
	binary.BigEndian.PutUint32(out, uint32(len(parts)))
	off := head
	for i, p := range parts {
		binary.BigEndian.PutUint32(out[4*(1+i):], uint32(off))
		off += len(p)
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, true, nil
}

// decodeLegacy reads a legacy text or binary frame.
func decodeLegacy(b []byte, binaryFrame bool) (jupyter.Msg, error) {
	var buffers [][]byte
	if binaryFrame {
		if len(b) < 4 {
			return jupyter.Msg{}, fmt.Errorf("%w: %d bytes", errFrame, len(b))
		}
		n := binary.BigEndian.Uint32(b)
		if n < 1 || uint64(n) > uint64(len(b))/4-1 {
			return jupyter.Msg{}, fmt.Errorf("%w: %d parts in %d bytes", errFrame, n, len(b))
		}
		offs := make([]int, n+1)
		for i := 0; i < int(n); i++ {
			offs[i] = int(binary.BigEndian.Uint32(b[4*(1+i):]))
			if offs[i] < 4*(1+int(n)) || offs[i] > len(b) || (i > 0 && offs[i] < offs[i-1]) {
				return jupyter.Msg{}, fmt.Errorf("%w: offset %d is %d", errFrame, i, offs[i])
			}
		}
		offs[n] = len(b)
		for i := 1; i < int(n); i++ {
			buffers = append(buffers, b[offs[i]:offs[i+1]])
		}
		b = b[offs[0]:offs[1]]
	}
	var lm legacyMsg
	if err := json.Unmarshal(b, &lm); err != nil {
		return jupyter.Msg{}, fmt.Errorf("%w: %v", errFrame, err)
	}
	return jupyter.Msg{Channel: lm.Channel, Header: lm.Header, Parent: lm.Parent, Metadata: lm.Metadata, Content: lm.Content, Buffers: buffers}, nil
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
