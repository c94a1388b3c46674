package jupyter

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/go-zeromq/zmq4"
)

// TestStartRetriesATakenPort: when another process takes one of a new
// kernel's ports before the kernel binds it, and the agent's dial reaches
// that foreign socket first, the start is retried with new ports instead
// of failing. Here a ZeroMQ PULL socket holds the heartbeat port of the
// first attempt, as another kernel's socket did on a loaded machine.
func TestStartRetriesATakenPort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	pull := zmq4.NewPull(ctx)
	defer pull.Close()
	if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(pull.Addr().String())
	taken, _ := strconv.Atoi(port)

	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper})
	defer m.Close()
	var calls atomic.Int32
	m.newConnInfo = func(name string) (connInfo, error) {
		info, err := newConnInfo(name)
		if calls.Add(1) == 1 {
			info.HBPort = taken
		}
		return info, err
	}
	k, err := m.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatalf("start with a taken port: %v", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("ports were picked %d times, want 2 (one retry)", n)
	}
	s, _, err := m.Execute(ctx, k.ID(), "print(6*7)", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	evs, end := attach(t, s, 0).all()
	if end.Status != "ok" || stdout(evs) != "42\n" { // one print, maybe in several messages
		t.Fatalf("cell on the retried kernel: %+v, end %+v", evs, end)
	}
}

// TestStartSurvivesLostMessages: a kernel start whose first
// kernel_info_requests and whose iopub subscription are lost (as a start
// on a loaded machine once waited its two minutes out with the kernel up)
// repeats them and gets a working kernel.
func TestStartSurvivesLostMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper})
	defer m.Close()
	m.lose = &losses{subscription: true}
	m.lose.requests.Store(2)
	k, err := m.Start(ctx, StartOptions{})
	if err != nil {
		t.Fatalf("start with lost messages: %v", err)
	}
	if n := m.lose.requests.Load(); n >= 0 {
		t.Fatalf("%d lost requests left: the start did not send its request again", n+1)
	}
	s, _, err := m.Execute(ctx, k.ID(), "print(6*7)", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	evs, end := attach(t, s, 0).all()
	if end.Status != "ok" || stdout(evs) != "42\n" {
		t.Fatalf("cell on the kernel: %+v, end %+v", evs, end)
	}
}
