package endpoint

import (
	"encoding/json"
	"strconv"

	"github.com/rayito/rayito-agent/internal/files"
	"github.com/rayito/rayito-agent/internal/jupyter"
	"github.com/rayito/rayito-agent/internal/stream"
)

// eventNames are the native protocol's names of the events of each kind
// of stream (sections 6, 11.5 and 11.11); a stream's log holds each
// event's body as its producer encoded it, and the name, stream and seq
// are added here, as they are sent.
var eventNames = map[stream.Kind]string{
	stream.KindWatch: "fs",
	stream.KindCell:  "cell",
	files.KindWrite:  "progress",
}

// appendEvent appends the frame of an event of st to dst:
// {"event": NAME, "stream": S, "seq": N, ...the body's fields}. A relay's
// message (kernel_channels) is held in jupyter's binary framing and sent
// as {"event": "jupyter", "stream", "seq", "msg": {...}}, buffers in
// base64; false if it cannot be decoded.
func appendEvent(dst []byte, st *stream.Stream, item stream.Item) ([]byte, bool) {
	if st.Kind == stream.KindChannels {
		m, err := jupyter.DecodeMsg(item.Data)
		if err != nil {
			return dst, false
		}
		js, err := json.Marshal(m)
		if err != nil {
			return dst, false
		}
		dst = appendEnvelope(dst, "jupyter", st.ID, item.Offset)
		dst = append(dst, `,"msg":`...)
		dst = append(dst, js...)
		return append(dst, '}'), true
	}
	dst = appendEnvelope(dst, eventNames[st.Kind], st.ID, item.Offset)
	body := item.Data
	if len(body) < 2 || body[0] != '{' {
		return dst, false
	}
	if len(body) > 2 { // more than {}
		dst = append(dst, ',')
	}
	return append(dst, body[1:]...), true
}

// appendEnvelope appends {"event":name,"stream":id,"seq":seq, without
// the closing brace.
func appendEnvelope(dst []byte, name string, id, seq uint64) []byte {
	dst = append(dst, `{"event":"`...)
	dst = append(dst, name...)
	dst = append(dst, `","stream":`...)
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, `,"seq":`...)
	return strconv.AppendUint(dst, seq, 10)
}
