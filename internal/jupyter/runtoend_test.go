package jupyter

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// TestRestartRunsToItsEnd: a restart whose caller stops waiting at once
// (a client that went away) still gives the kernel its new process; the
// caller hears unavailable.
func TestRestartRunsToItsEnd(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	before := k.Info().Pid
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	wantCode(t, env.mgr.Restart(ctx, k.ID()), "unavailable")
	waitState(t, k.ID(), StateIdle)
	if pid := k.Info().Pid; pid == before || pid == 0 {
		t.Fatalf("pid %d after the restart, %d before", pid, before)
	}
	if _, end := run(t, k.ID(), "1"); end.Status != StatusOK {
		t.Fatalf("a cell after the abandoned restart: %+v", end)
	}
}

// TestRelayMessageWaitsForRestart: a message sent through a relay while
// its kernel restarts goes to the new process instead of failing.
func TestRelayMessageWaitsForRestart(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	rs, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	r := attach(t, rs, 0)
	restarted := make(chan error, 1)
	go func() { restarted <- env.mgr.Restart(context.Background(), k.ID()) }()
	for deadline := time.Now().Add(waitFor); k.Info().State != StateStarting; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the restart never began")
		}
	}
	msgID := "wait-" + newID()
	req := fmt.Sprintf(`{"channel":"shell","header":{"msg_type":"kernel_info_request","msg_id":%q},"content":{}}`, msgID)
	if err := rs.Control.(sender).Send(context.Background(), json.RawMessage(req)); err != nil {
		t.Fatalf("send during the restart: %v", err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	for {
		ev, end := r.next()
		if end != nil {
			t.Fatalf("relay ended: %+v", end)
		}
		var parent struct {
			MsgID string `json:"msg_id"`
		}
		json.Unmarshal(ev.Msg.Parent, &parent)
		if parent.MsgID == msgID && ev.Msg.Channel == "shell" {
			return
		}
	}
}
