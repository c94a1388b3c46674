package jupyter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/rayito/rayito-agent/internal/stream"
)

// BenchmarkExecuteRoundTrip runs the cell `x` to its end through the
// Manager (queue, cell stream, attachment) and, on the same kernel,
// through a bare zmq4 client that only signs, sends and waits for the
// reply and the idle status: the difference is what the agent adds.
func BenchmarkExecuteRoundTrip(b *testing.B) {
	k := startKernel(b)
	if _, end := run(b, k.ID(), "x = 42"); end.Status != StatusOK {
		b.Fatalf("setup: %+v", end)
	}
	b.Run("manager", func(b *testing.B) {
		ctx := context.Background()
		for b.Loop() {
			s, _, err := env.mgr.Execute(ctx, k.ID(), "x", 0, false)
			if err != nil {
				b.Fatal(err)
			}
			drainStream(b, s)
		}
	})
	b.Run("zmq4-direct", func(b *testing.B) {
		inst, err := k.current()
		if err != nil {
			b.Fatal(err)
		}
		d := dialDirect(b, inst.info)
		for b.Loop() {
			d.execute(b, "x")
		}
	})
}

func drainStream(b *testing.B, s *stream.Stream) {
	a, err := s.Attach(nil, stream.DefaultWindow)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for seq := uint64(0); ; {
		it, err := a.Next(ctx, nil, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		switch it.Kind {
		case stream.ItemEnd:
			if it.End.Status != StatusOK {
				b.Fatalf("cell ended %+v", it.End)
			}
			return
		case stream.ItemEvent:
			seq++
			a.Ack(map[string]uint64{EventsChannel: seq})
		}
	}
}

// direct is the baseline client: one DEALER for shell, one SUB for iopub.
type direct struct {
	sign    *signer
	session string
	shell   zmq4.Socket
	iopub   zmq4.Socket
	shellC  chan zmq4.Msg
	iopubC  chan zmq4.Msg
}

func dialDirect(b *testing.B, info connInfo) *direct {
	ctx, cancel := context.WithCancel(context.Background())
	d := &direct{sign: newSigner(info.Key), session: newID(), shellC: make(chan zmq4.Msg, 16), iopubC: make(chan zmq4.Msg, 16)}
	d.shell = zmq4.NewDealer(ctx, zmq4.WithID(zmq4.SocketIdentity(d.session)))
	d.iopub = zmq4.NewSub(ctx)
	d.iopub.SetOption(zmq4.OptionSubscribe, "")
	var wg sync.WaitGroup
	b.Cleanup(func() {
		cancel()
		d.shell.Close()
		d.iopub.Close()
		wg.Wait()
	})
	for _, p := range []struct {
		s    zmq4.Socket
		port int
		out  chan zmq4.Msg
	}{{d.shell, info.ShellPort, d.shellC}, {d.iopub, info.IOPubPort, d.iopubC}} {
		if err := p.s.Dial(info.endpoint(p.port)); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := p.s.Recv()
				if err != nil {
					if ctx.Err() != nil {
						drain(p.s)
						return
					}
					continue
				}
				select {
				case p.out <- m:
				case <-ctx.Done():
				}
			}
		}()
	}
	// Wait for the subscription to reach the kernel: kernel_info makes
	// it publish a status. Stale messages are skipped by execute.
	for live := false; !live; {
		d.send(b, "kernel_info_request", map[string]any{})
		select {
		case <-d.iopubC:
			live = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	return d
}

func (d *direct) send(b *testing.B, msgType string, body any) string {
	m, err := newMessage(d.session, msgType, nil, body)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.shell.SendMulti(zmq4.NewMsgFrom(d.sign.encode(m)...)); err != nil {
		b.Fatal(err)
	}
	return m.MsgID
}

func (d *direct) execute(b *testing.B, code string) {
	id := d.send(b, "execute_request", map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{}, "allow_stdin": false,
	})
	timeout := time.NewTimer(waitFor)
	defer timeout.Stop()
	for replied, idle := false, false; !replied || !idle; {
		var zm zmq4.Msg
		select {
		case zm = <-d.shellC:
		case zm = <-d.iopubC:
		case <-timeout.C:
			b.Fatal("no reply")
		}
		m, err := d.sign.decode(zm.Frames)
		if err != nil || m.ParentID != id {
			continue
		}
		switch m.MsgType {
		case "execute_reply":
			replied = true
		case "status":
			c, _ := m.content()
			idle = idle || c.ExecutionState == "idle"
		}
	}
}
