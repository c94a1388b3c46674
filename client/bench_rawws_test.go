package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rayito/rayito-agent/internal/wire"
)

// rawEcho types on a terminal through the agent with a bare websocket and
// the wire package, without the SDK: the agent's share of an echo.
func rawEcho(b *testing.B, url string) []time.Duration {
	ctx := context.Background()
	hdr := http.Header{"Authorization": {"Bearer " + testToken}}
	ws, _, err := websocket.Dial(ctx, url+"/v1/connect", &websocket.DialOptions{Subprotocols: []string{"rayito.v1"}, HTTPHeader: hdr})
	if err != nil {
		b.Fatal(err)
	}
	defer ws.CloseNow()
	req, _ := json.Marshal(map[string]any{"id": 1, "op": "pty", "argv": echoProgram})
	if err := ws.Write(ctx, websocket.MessageText, req); err != nil {
		b.Fatal(err)
	}
	var id uint64
	var out []byte
	for !bytes.HasSuffix(out, []byte("READY")) { // hello, the response, output
		typ, msg, err := ws.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if typ == websocket.MessageBinary {
			d, err := wire.DecodeData(msg)
			if err != nil {
				b.Fatal(err)
			}
			out = append(out, d.Payload...)
			continue
		}
		var resp struct {
			ID     uint64 `json:"id"`
			Result struct {
				Stream uint64 `json:"stream"`
			} `json:"result"`
		}
		if json.Unmarshal(msg, &resp) == nil && resp.ID == 1 {
			id = resp.Result.Stream
		}
	}
	lat := make([]time.Duration, 0, b.N)
	frame := make([]byte, 0, 32)
	b.ResetTimer()
	for i := range b.N {
		key := 'a' + byte(i%26)
		frame = wire.AppendData(frame[:0], wire.Data{Type: wire.In, Stream: id, Payload: []byte{key}})
		start := time.Now()
		if err := ws.Write(ctx, websocket.MessageBinary, frame); err != nil {
			b.Fatal(err)
		}
		_, msg, err := ws.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if d, err := wire.DecodeData(msg); err != nil || len(d.Payload) != 1 || d.Payload[0] != key {
			b.Fatalf("echo %q of %q: %v", msg, key, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
	return lat
}
