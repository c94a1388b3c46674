package envdapi

import (
	"math/rand"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
)

// The fast path writes what protojson reads back as the same message, for
// every output channel, any bytes, and empty data; other messages go
// through protojson.
func TestJSONCodecRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewSource(1))
	data := func(d *process.ProcessEvent_DataEvent) *process.ProcessEvent {
		return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
	}
	var msgs []proto.Message
	for _, n := range []int{0, 1, 2, 3, 1000, 1 << 18} {
		b := make([]byte, n)
		rng.Read(b)
		msgs = append(msgs,
			&process.StartResponse{Event: data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: b}})},
			&process.ConnectResponse{Event: data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{Stderr: b}})},
			&process.StartResponse{Event: data(&process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Pty{Pty: b}})},
		)
	}
	code := "exit status 3"
	msgs = append(msgs,
		&process.StartResponse{Event: data(&process.ProcessEvent_DataEvent{})},
		&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: code, Error: &code}}}},
		&process.ConnectResponse{},
		&process.ListResponse{Processes: []*process.ProcessInfo{{Pid: 7}}},
	)
	c := jsonCodecs[0]
	for _, m := range msgs {
		b, err := c.MarshalAppend([]byte("prefix"), m)
		if err != nil {
			t.Fatal(err)
		}
		if string(b[:6]) != "prefix" {
			t.Fatalf("MarshalAppend lost dst: %q", b[:6])
		}
		got := m.ProtoReflect().New().Interface()
		if err := protojson.Unmarshal(b[6:], got); err != nil {
			t.Fatalf("%T: protojson cannot read %.100q: %v", m, b[6:], err)
		}
		if !proto.Equal(got, m) {
			t.Fatalf("%T: round trip changed %v into %v", m, m, got)
		}
	}
	if _, err := c.Marshal(struct{}{}); err == nil {
		t.Fatal("a non-protobuf value was marshalled")
	}
	if err := c.Unmarshal(nil, &process.ListRequest{}); err == nil {
		t.Fatal("an empty payload was accepted")
	}
}
