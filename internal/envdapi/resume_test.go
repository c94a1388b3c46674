package envdapi_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
	"github.com/rayito/rayito-agent/internal/resume"
	"github.com/rayito/rayito-agent/internal/stream"
)

// A cut ends a process stream with unavailable only after all the output
// the stream held at the cut, even what the client had not read yet.
// The cut's bound is generous here: the race detector makes reading
// megabytes of JSON slow, and the bound is not what this test is about.
func TestResumeCutDeliversWhatWasWritten(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{smallBuffers: true})
	s, pid := started(t, a, withStdin(startReq("head -c 6000000 /dev/zero; read x; echo after $x")))

	// The client reads nothing, so the command fills its log and blocks.
	out := waitStdoutFull(t, a, pid)
	written := out.Stats().End

	cut := make(chan struct{})
	go func() {
		defer close(cut)
		a.cuts.CutForResume(ctxLong(t), 1)
	}()
	r := finish(s, pid)
	wantCode(t, r.err, connect.CodeUnavailable, "resume generation 1")
	if uint64(len(r.stdout)) < written || bytes.IndexFunc(r.stdout, func(c rune) bool { return c != 0 }) >= 0 {
		t.Fatalf("got %d bytes of output, the log held %d at the cut", len(r.stdout), written)
	}
	<-cut

	// Connecting again streams from now on, to the end.
	c, err := a.pc.Connect(ctxLong(t), authed(connect.NewRequest(&process.ConnectRequest{Process: byPid(pid)})))
	if err != nil {
		t.Fatal(err)
	}
	again := collect(c, func(r *run, ev *process.ProcessEvent) {
		if ev.GetStart() != nil {
			if err := sendStdin(t, a, byPid(pid), "x\n"); err != nil {
				t.Error(err)
			}
		}
	})
	if !bytes.HasSuffix(again.stdout, []byte("after x\n")) || again.end.GetExitCode() != 0 || again.err != nil {
		t.Fatalf("after the cut: %d bytes ending %q, end %v, err %v", len(again.stdout), again.stdout[max(0, len(again.stdout)-20):], again.end, again.err)
	}
	if total := len(r.stdout) + len(again.stdout) - len("after x\n"); total > 6000000 {
		t.Fatalf("%d bytes of output in all, more than the command wrote", total)
	}
}

// A resume ends every kind of stream of the API with unavailable naming
// the resume; afterwards the same client connects again by pid (on a
// connection the cut may have left with deadlines) and works.
func TestResumeEndsEveryStream(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	s, pid := started(t, a, withStdin(startReq("echo hello; cat")))
	w := watchDir(t, ctxLong(t), a, &filesystem.WatchDirRequest{Path: t.TempDir()})
	in := a.pc.StreamInput(ctxLong(t))
	in.RequestHeader().Set("X-Access-Token", nativeToken)
	for _, m := range []*process.StreamInputRequest{
		{Event: &process.StreamInputRequest_Start{Start: &process.StreamInputRequest_StartEvent{Process: byPid(pid)}}},
		{Event: &process.StreamInputRequest_Data{Data: &process.StreamInputRequest_DataEvent{
			Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte("typed\n")}}}}},
	} {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	// Every call is in flight once the command has echoed the input.
	var r run
	for !bytes.Equal(r.stdout, []byte("hello\ntyped\n")) {
		if !s.Receive() {
			t.Fatalf("stream ended early: %v (%q)", s.Err(), r.stdout)
		}
		r.stdout = append(r.stdout, s.Msg().GetEvent().GetData().GetStdout()...)
	}

	a.resume.Resume(ctxLong(t), resume.Report{Source: resume.SourceHost})
	r = finish(s, pid)
	wantCode(t, r.err, connect.CodeUnavailable, "resume generation 1")
	for w.Receive() {
	}
	wantCode(t, w.Err(), connect.CodeUnavailable, "resume generation 1")
	_, err := in.CloseAndReceive()
	wantCode(t, err, connect.CodeUnavailable, "resume generation 1")

	c, err := a.pc.Connect(ctxLong(t), authed(connect.NewRequest(&process.ConnectRequest{Process: byPid(pid)})))
	if err != nil {
		t.Fatal(err)
	}
	again := collect(c, func(r *run, ev *process.ProcessEvent) {
		if ev.GetStart() == nil {
			return
		}
		if err := sendStdin(t, a, byPid(pid), "more\n"); err != nil {
			t.Error(err)
		}
		if _, err := a.pc.CloseStdin(ctxLong(t), authed(connect.NewRequest(&process.CloseStdinRequest{Process: byPid(pid)}))); err != nil {
			t.Error(err)
		}
	})
	if string(again.stdout) != "more\n" || again.end.GetExitCode() != 0 || again.err != nil {
		t.Fatalf("after the resume: %q %v %v", again.stdout, again.end, again.err)
	}
}

// A client that stops reading (a connection the snapshot left half-dead)
// holds nothing up at a resume: the cut bounds the stream's writes by its
// deadline, so it returns within its bound and the handler, blocked on a
// full connection, returns too.
func TestResumeCutWithClientNotReading(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{smallBuffers: true})
	// The client's own timeout, which would end the request, is far off.
	long, cancelLong := context.WithTimeout(context.Background(), 10*waitLong)
	defer cancelLong()
	s, err := a.pc.Start(long, startReq("yes output"))
	if err != nil || !s.Receive() {
		t.Fatalf("start: %v, %v", err, s.Err())
	}
	defer s.Close()
	pid := s.Msg().GetEvent().GetStart().GetPid()

	// The client reads nothing after the start event: the connection's
	// buffers fill, the handler blocks on a write, then the log fills.
	waitStdoutFull(t, a, pid)
	if n := a.cuts.Len(); n != 1 {
		t.Fatalf("%d calls in flight, want the Start stream", n)
	}

	const bound = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	began := time.Now()
	a.cuts.CutForResume(ctx, 1)
	// Slack for a loaded machine; a cut that waited for the client would
	// not return at all.
	if took := time.Since(began); took > bound+3*time.Second {
		t.Fatalf("the cut took %v, its bound is %v", took, bound)
	}
	for a.cuts.Len() != 0 {
		if time.Since(began) > bound+10*time.Second {
			t.Fatal("the Start handler never returned after the cut")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The client, reading again, gets what was buffered, then an error.
	ended := make(chan run, 1)
	go func() { ended <- finish(s, pid) }()
	select {
	case r := <-ended:
		if r.err == nil {
			t.Fatalf("the stream ended without an error after %d bytes", len(r.stdout))
		}
	case <-time.After(waitLong):
		t.Fatal("the client's stream never ended after the cut")
	}
	// Connecting again works; the command, killed, ends the stream.
	c, err := a.pc.Connect(ctxLong(t), authed(connect.NewRequest(&process.ConnectRequest{Process: byPid(pid)})))
	if err != nil {
		t.Fatal(err)
	}
	again := collect(c, func(r *run, ev *process.ProcessEvent) {
		if ev.GetStart() != nil {
			if err := killPid(t, a, pid, process.Signal_SIGNAL_SIGKILL); err != nil {
				t.Error(err)
			}
		}
	})
	if again.err != nil || again.end.GetStatus() != "signal: killed" {
		t.Fatalf("after the cut: end %v, err %v", again.end, again.err)
	}
}

// waitStdoutFull waits until the stdout log of the process pid holds as
// much as it can (its command then blocks on its next write) and returns
// the log.
func waitStdoutFull(t *testing.T, a *agent, pid uint32) *stream.Log {
	t.Helper()
	out := a.streams.Find(int(pid), "").Log("stdout")
	deadline := time.Now().Add(waitLong)
	for st := out.Stats(); st.End-st.Start < stream.DefaultByteCapacity; st = out.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("the log never filled: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return out
}

// A cut ends only calls older than its generation: a stream started
// after a resume (a client that reconnected at once, in the window before
// the resume sequence cuts) is not ended by that resume's cut.
func TestResumeCutSparesItsOwnGeneration(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	a.resume.Resume(ctxLong(t), resume.Report{Source: resume.SourceHost})
	gen := a.resume.Generation()
	if gen == 0 {
		t.Fatal("the resume did not advance the generation")
	}
	s, pid := started(t, a, withStdin(startReq("echo ready; cat")))
	var r run
	for !bytes.Equal(r.stdout, []byte("ready\n")) {
		if !s.Receive() {
			t.Fatalf("stream ended early: %v (%q)", s.Err(), r.stdout)
		}
		r.stdout = append(r.stdout, s.Msg().GetEvent().GetData().GetStdout()...)
	}
	a.cuts.CutForResume(ctxLong(t), gen)
	if err := sendStdin(t, a, byPid(pid), "still here\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.pc.CloseStdin(ctxLong(t), authed(connect.NewRequest(&process.CloseStdinRequest{Process: byPid(pid)}))); err != nil {
		t.Fatal(err)
	}
	rest := finish(s, pid)
	if rest.err != nil || string(rest.stdout) != "still here\n" || rest.end.GetExitCode() != 0 {
		t.Fatalf("the stream of generation %d after its own cut: %q, end %v, err %v", gen, rest.stdout, rest.end, rest.err)
	}
}
