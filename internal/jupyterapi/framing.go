package jupyterapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rayito/rayito-agent/internal/jupyter"
)

// v1Protocol is the kernel websocket subprotocol of jupyter_server 1.23+:
// binary frames in jupyter.Msg.Encode's framing, which is how a relay's
// stream holds its messages, so they go out as they are.
const v1Protocol = "v1.kernel.websocket.jupyter.org"

var errFrame = errors.New("jupyterapi: malformed frame")

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
	buffers := m.Buffers
	m.Buffers = nil // they go in binary parts, not in the JSON
	js, err := json.Marshal(m)
	if err != nil || len(buffers) == 0 {
		return js, false, err
	}
	parts := append([][]byte{js}, buffers...)
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
