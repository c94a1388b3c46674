package envdapi_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
)

// started starts cmd and returns its stream after the start event, and
// the pid.
func started(t *testing.T, a *agent, req *connect.Request[process.StartRequest]) (*connect.ServerStreamForClient[process.StartResponse], uint32) {
	t.Helper()
	s, err := a.pc.Start(ctxLong(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	t.Cleanup(func() { s.Close() })
	return s, s.Msg().GetEvent().GetStart().GetPid()
}

func finish(s *connect.ServerStreamForClient[process.StartResponse], pid uint32) run {
	return collectFrom(s, run{pid: pid}, false, nil)
}

func TestSendInputErrors(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	s, pid := started(t, a, startReq("sleep 1000"))
	_, err := a.pc.SendInput(ctxLong(t), authed(connect.NewRequest(&process.SendInputRequest{Process: byPid(pid)})))
	wantCode(t, err, connect.CodeInvalidArgument, "stdin or pty")
	wantCode(t, sendStdin(t, a, byPid(pid), "x"), connect.CodeInvalidArgument, "without stdin")
	killPid(t, a, pid, process.Signal_SIGNAL_SIGKILL)
	finish(s, pid)
	wantCode(t, sendStdin(t, a, byPid(pid), "x"), connect.CodeNotFound, "exited")
}

func killPid(t *testing.T, a *agent, pid uint32, sig process.Signal) error {
	t.Helper()
	_, err := a.pc.SendSignal(ctxLong(t), authed(connect.NewRequest(&process.SendSignalRequest{Process: byPid(pid), Signal: sig})))
	return err
}

// SendSignal reaches the whole process group, as a kill should: a child
// in the background dies with the command.
func TestSendSignal(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	s, pid := started(t, a, startReq("sleep 1000 & echo $!; wait"))
	var child int
	r := collectFrom(s, run{pid: pid}, false, func(r *run, ev *process.ProcessEvent) {
		if ev.GetData() != nil && child == 0 {
			child, _ = strconv.Atoi(strings.TrimSpace(string(r.stdout)))
			if err := killPid(t, a, pid, process.Signal_SIGNAL_SIGTERM); err != nil {
				t.Error(err)
			}
		}
	})
	if r.end.GetStatus() != "signal: terminated" {
		t.Fatalf("end %v, err %v", r.end, r.err)
	}
	waitGone(t, child)
	wantCode(t, killPid(t, a, pid, process.Signal_SIGNAL_SIGKILL), connect.CodeNotFound, "exited")
	wantCode(t, killPid(t, a, pid, process.Signal_SIGNAL_UNSPECIFIED), connect.CodeInvalidArgument, "signal")
	wantCode(t, killPid(t, a, pid, process.Signal(2)), connect.CodeInvalidArgument, "signal")
}

func TestCloseStdin(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	// The command outlives its stdin, so the refusals below are about
	// the closed stdin, not about an exited process.
	s, pid := started(t, a, withStdin(startReq("cat; echo; exec sleep 1000")))
	if err := sendStdin(t, a, byPid(pid), "hello"); err != nil {
		t.Fatal(err)
	}
	closeStdin := func() error {
		_, err := a.pc.CloseStdin(ctxLong(t), authed(connect.NewRequest(&process.CloseStdinRequest{Process: byPid(pid)})))
		return err
	}
	if err := closeStdin(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, closeStdin(), connect.CodeFailedPrecondition, "closed")
	wantCode(t, sendStdin(t, a, byPid(pid), "late"), connect.CodeFailedPrecondition, "closed")
	r := collectFrom(s, run{pid: pid}, false, func(r *run, ev *process.ProcessEvent) {
		if string(r.stdout) == "hello\n" && ev.GetData() != nil {
			killPid(t, a, pid, process.Signal_SIGNAL_SIGKILL) // cat saw the end of its input
		}
	})
	if string(r.stdout) != "hello\n" || r.end.GetStatus() != "signal: killed" {
		t.Fatalf("cat: %q %v %v", r.stdout, r.end, r.err)
	}
}

// Terminal-only and command-only RPCs refuse the other kind.
func TestKindMismatch(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	_, cmd := started(t, a, startReq("sleep 1000"))
	_, term := started(t, a, authed(connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "cat"}, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}}})))
	resize := func(pid, cols, rows uint32) error {
		_, err := a.pc.Update(ctxLong(t), authed(connect.NewRequest(&process.UpdateRequest{
			Process: byPid(pid), Pty: &process.PTY{Size: &process.PTY_Size{Cols: cols, Rows: rows}}})))
		return err
	}
	wantCode(t, resize(cmd, 100, 40), connect.CodeInvalidArgument, "terminal")
	wantCode(t, resize(term, 0, 40), connect.CodeInvalidArgument, "size")
	wantCode(t, resize(term, 100, 1<<20), connect.CodeInvalidArgument, "size")
	if err := resize(term, 100, 40); err != nil {
		t.Fatal(err)
	}
	_, err := a.pc.CloseStdin(ctxLong(t), authed(connect.NewRequest(&process.CloseStdinRequest{Process: byPid(term)})))
	wantCode(t, err, connect.CodeInvalidArgument, "Ctrl-D")
	for _, pid := range []uint32{cmd, term} {
		if err := killPid(t, a, pid, process.Signal_SIGNAL_SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
}

// StreamInput writes a client stream in order; it must name the process
// first.
func TestStreamInput(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	s, pid := started(t, a, withStdin(startReq("head -n 2")))
	send := func(msgs ...*process.StreamInputRequest) error {
		in := a.pc.StreamInput(ctxLong(t))
		in.RequestHeader().Set("X-Access-Token", nativeToken)
		for _, m := range msgs {
			if err := in.Send(m); err != nil {
				break // the server answered early; CloseAndReceive says why
			}
		}
		_, err := in.CloseAndReceive()
		return err
	}
	start := func(sel *process.ProcessSelector) *process.StreamInputRequest {
		return &process.StreamInputRequest{Event: &process.StreamInputRequest_Start{Start: &process.StreamInputRequest_StartEvent{Process: sel}}}
	}
	data := func(text string) *process.StreamInputRequest {
		return &process.StreamInputRequest{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{
			Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte(text)}}}}}
	}
	keepalive := &process.StreamInputRequest{Event: &process.StreamInputRequest_Keepalive{Keepalive: &process.StreamInputRequest_KeepAlive{}}}

	wantCode(t, send(data("early\n")), connect.CodeInvalidArgument, "start")
	wantCode(t, send(start(byPid(1<<30))), connect.CodeNotFound, "not found")
	wantCode(t, send(start(byPid(pid)), start(byPid(pid))), connect.CodeInvalidArgument, "already")
	if err := send(start(byPid(pid)), data("one\n"), keepalive, data("tw"), data("o\nthree\n")); err != nil {
		t.Fatal(err)
	}
	if r := finish(s, pid); string(r.stdout) != "one\ntwo\n" || r.end.GetExitCode() != 0 {
		t.Fatalf("head: %q %v %v", r.stdout, r.end, r.err)
	}
}

// Keepalive-Ping-Interval asks for keepalive events while nothing else is
// said; the process here waits for input until one has come.
func TestKeepalive(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	req := withStdin(startReq("read x; echo got $x"))
	req.Header().Set("Keepalive-Ping-Interval", "1")
	s, pid := started(t, a, req)
	r := collectFrom(s, run{pid: pid}, false, func(r *run, ev *process.ProcessEvent) {
		if ev.GetKeepalive() != nil && r.keepalives == 1 {
			if err := sendStdin(t, a, byPid(pid), "it\n"); err != nil {
				t.Error(err)
			}
		}
	})
	if string(r.stdout) != "got it\n" || r.keepalives < 1 || r.end.GetExitCode() != 0 {
		t.Fatalf("%q after %d keepalives, end %v %v", r.stdout, r.keepalives, r.end, r.err)
	}
}

// TestSendInputWaitsForRoom: SendInput to a program that reads later
// waits for room instead of failing past the agent's 1 MiB queue, and each
// call is all or nothing: one that gave up waiting wrote none of its bytes.
func TestSendInputWaitsForRoom(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	// The program reads nothing for a while, then everything.
	s, pid := started(t, a, withStdin(startReq("sleep 2; wc -c")))
	chunk := strings.Repeat("x", 512<<10)
	for range 6 { // 3 MiB: three times the queue
		if err := sendStdin(t, a, byPid(pid), chunk); err != nil {
			t.Fatalf("SendInput while the program does not read yet: %v", err)
		}
	}
	if _, err := a.pc.CloseStdin(ctxLong(t), authed(connect.NewRequest(&process.CloseStdinRequest{Process: byPid(pid)}))); err != nil {
		t.Fatal(err)
	}
	r := finish(s, pid)
	if got := strings.TrimSpace(string(r.stdout)); got != strconv.Itoa(6*len(chunk)) {
		t.Fatalf("the program read %s bytes, want %d", got, 6*len(chunk))
	}

	// A call whose client stops waiting for room leaves nothing behind:
	// the program counts exactly the bytes of the calls that succeeded.
	// It reads only once the test says so, so the queue stays full for
	// as long as the test needs, however slow the machine.
	gate := filepath.Join(t.TempDir(), "read-now")
	s2, pid2 := started(t, a, withStdin(startReq("while [ ! -e "+gate+" ]; do sleep 0.05; done; wc -c")))
	// Calls go in until the queue is full; the one that finds it full
	// waits for room and gives up. Its bound is far above what a call
	// that fits takes on a loaded machine, so only the waiting one fails.
	ok := 0
	for ; ok < 64; ok++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := a.pc.SendInput(ctx, authed(connect.NewRequest(&process.SendInputRequest{
			Process: byPid(pid2), Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte(chunk)}}})))
		cancel()
		if err != nil {
			wantCode(t, err, connect.CodeDeadlineExceeded, "")
			break
		}
	}
	if ok == 64 {
		t.Fatalf("%d calls of %d bytes went in before the program read anything", ok, len(chunk))
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pc.CloseStdin(ctxLong(t), authed(connect.NewRequest(&process.CloseStdinRequest{Process: byPid(pid2)}))); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(finish(s2, pid2).stdout)); got != strconv.Itoa(ok*len(chunk)) {
		t.Fatalf("the program read %s bytes; %d calls of %d succeeded, one gave up", got, ok, len(chunk))
	}
}
