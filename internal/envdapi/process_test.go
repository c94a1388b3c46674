package envdapi_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
)

func TestRunOutputAndExitShapes(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	for _, c := range []struct {
		cmd            string
		stdout, stderr string
		code           int32
		exited         bool
		status         string
	}{
		{"echo out; echo err >&2", "out\n", "err\n", 0, true, "exit status 0"},
		{"echo three; exit 3", "three\n", "", 3, true, "exit status 3"},
		{"kill -9 $$", "", "", -1, false, "signal: killed"},
	} {
		s, err := a.pc.Start(ctxLong(t), startReq(c.cmd))
		if err != nil {
			t.Fatal(err)
		}
		r := collect(s, nil)
		if r.err != nil || r.end == nil {
			t.Fatalf("%q: err %v, end %v", c.cmd, r.err, r.end)
		}
		e := r.end
		if string(r.stdout) != c.stdout || string(r.stderr) != c.stderr || e.ExitCode != c.code || e.Exited != c.exited || e.Status != c.status {
			t.Errorf("%q: stdout %q stderr %q end %v", c.cmd, r.stdout, r.stderr, e)
		}
		if (e.Error != nil) != (c.code != 0) {
			t.Errorf("%q: error field %v", c.cmd, e.Error)
		}
	}
}

func TestStartEnvCwdUser(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	dir := "/usr" // nobody may enter it
	req := startReq(`echo "$FOO"; pwd; whoami`)
	req.Msg.Process.Envs = map[string]string{"FOO": "bar baz"}
	req.Msg.Process.Cwd = &dir
	req.Header().Set("Authorization", "Basic bm9ib2R5Og==") // nobody:
	s, err := a.pc.Start(ctxLong(t), req)
	if err != nil {
		t.Fatal(err)
	}
	r := collect(s, nil)
	if want := "bar baz\n" + dir + "\nnobody\n"; string(r.stdout) != want || r.end.GetExitCode() != 0 {
		t.Fatalf("stdout %q (stderr %q, end %v), want %q", r.stdout, r.stderr, r.end, want)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	size := func(cols, rows uint32) *process.PTY {
		return &process.PTY{Size: &process.PTY_Size{Cols: cols, Rows: rows}}
	}
	nowhere := "/no/such/dir"
	for _, c := range []struct {
		name  string
		edit  func(*connect.Request[process.StartRequest])
		code  connect.Code
		words string
	}{
		{"no cmd", func(r *connect.Request[process.StartRequest]) { r.Msg.Process.Cmd = "" }, connect.CodeInvalidArgument, "cmd"},
		{"no process", func(r *connect.Request[process.StartRequest]) { r.Msg.Process = nil }, connect.CodeInvalidArgument, "cmd"},
		{"missing program", func(r *connect.Request[process.StartRequest]) { r.Msg.Process.Cmd = "/no/such/program" }, connect.CodeInvalidArgument, "/no/such/program"},
		{"missing user", func(r *connect.Request[process.StartRequest]) {
			r.Header().Set("Authorization", "Basic bm8tc3VjaC11c2VyOg==") // no-such-user:
		}, connect.CodeInvalidArgument, "no-such-user"},
		{"malformed user", func(r *connect.Request[process.StartRequest]) { r.Header().Set("Authorization", "Basic %%%") }, connect.CodeInvalidArgument, "Basic"},
		{"missing cwd", func(r *connect.Request[process.StartRequest]) { r.Msg.Process.Cwd = &nowhere }, connect.CodeInvalidArgument, nowhere},
		{"bad env", func(r *connect.Request[process.StartRequest]) { r.Msg.Process.Envs = map[string]string{"A=B": "c"} }, connect.CodeInvalidArgument, "environment"},
		{"pty of size 0", func(r *connect.Request[process.StartRequest]) { r.Msg.Pty = size(0, 24) }, connect.CodeInvalidArgument, "size"},
		{"pty too wide", func(r *connect.Request[process.StartRequest]) { r.Msg.Pty = size(70000, 24) }, connect.CodeInvalidArgument, "70000"},
		{"pty without size", func(r *connect.Request[process.StartRequest]) { r.Msg.Pty = &process.PTY{} }, connect.CodeInvalidArgument, "size"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := startReq("echo never")
			c.edit(req)
			s, err := a.pc.Start(ctxLong(t), req)
			if err != nil {
				t.Fatal(err)
			}
			r := collect(s, nil)
			if r.pid != 0 {
				t.Fatalf("a process started (pid %d)", r.pid)
			}
			wantCode(t, r.err, c.code, c.words)
		})
	}
	if n := len(a.streams.List("")); n != 0 {
		t.Fatalf("refused starts left %d streams", n)
	}
}

// The request's deadline is the process's lifetime: the stream ends with
// deadline_exceeded, and the process group is terminated.
func TestStartLifetime(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	req := startReq("sleep 1000 & echo $!; wait")
	req.Header().Set("Connect-Timeout-Ms", "700")
	// No deadline of the client's own: it would replace the header.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := a.pc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r := collect(s, nil)
	wantCode(t, r.err, connect.CodeDeadlineExceeded, "Connect-Timeout-Ms")
	st := a.streams.Find(int(r.pid), "")
	select {
	case <-st.Done():
	case <-time.After(waitLong):
		t.Fatal("the process outlived its lifetime")
	}
	if e := st.Ended(); e.Signal != "SIGTERM" {
		t.Fatalf("end %+v, want SIGTERM", e)
	}
	sleep, _ := strconv.Atoi(strings.TrimSpace(string(r.stdout)))
	waitGone(t, sleep)
}

// waitGone waits for pid to be gone (or a zombie nobody reaps yet).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("no pid to check (%d)", pid)
	}
	deadline := time.Now().Add(waitLong)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || bytes.Contains(b, []byte(") Z ")) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d is still alive", pid)
}

// A terminal: input, resize and kill through the RPCs the SDK's pty uses.
func TestPTY(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	req := authed(connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"--norc", "--noprofile"}, Envs: map[string]string{"PS1": "$ "}},
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}},
	}))
	s, err := a.pc.Start(ctxLong(t), req)
	if err != nil {
		t.Fatal(err)
	}
	step := 0
	input := func(pid uint32, text string) {
		_, err := a.pc.SendInput(ctxLong(t), authed(connect.NewRequest(&process.SendInputRequest{
			Process: byPid(pid), Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte(text)}}})))
		if err != nil {
			t.Error(err)
		}
	}
	r := collect(s, func(r *run, ev *process.ProcessEvent) {
		switch {
		case step == 0 && ev.GetStart() != nil:
			step++
			input(r.pid, "stty size\r")
		case step == 1 && bytes.Contains(r.pty, []byte("24 80")):
			step++
			_, err := a.pc.Update(ctxLong(t), authed(connect.NewRequest(&process.UpdateRequest{
				Process: byPid(r.pid), Pty: &process.PTY{Size: &process.PTY_Size{Cols: 100, Rows: 40}}})))
			if err != nil {
				t.Error(err)
			}
			input(r.pid, "stty size\r")
		case step == 2 && bytes.Contains(r.pty, []byte("40 100")):
			step++
			_, err := a.pc.SendSignal(ctxLong(t), authed(connect.NewRequest(&process.SendSignalRequest{
				Process: byPid(r.pid), Signal: process.Signal_SIGNAL_SIGKILL})))
			if err != nil {
				t.Error(err)
			}
		}
	})
	if step != 3 || r.end.GetStatus() != "signal: killed" {
		t.Fatalf("step %d, end %v, err %v; output %q", step, r.end, r.err, r.pty)
	}
	if len(r.stdout)+len(r.stderr) != 0 {
		t.Fatal("a terminal's output came as stdout or stderr")
	}
}
