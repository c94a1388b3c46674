package envdapi_test

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"connectrpc.com/connect"

	"github.com/rayito/rayito-agent/internal/envdapi/gen/filesystem"
	"github.com/rayito/rayito-agent/internal/envdapi/gen/process"
	"github.com/rayito/rayito-agent/internal/proc"
	"github.com/rayito/rayito-agent/internal/stream"
)

// sendStdin writes to a process's stdin as commands.sendStdin does.
func sendStdin(t *testing.T, a *agent, sel *process.ProcessSelector, text string) error {
	t.Helper()
	_, err := a.pc.SendInput(ctxLong(t), authed(connect.NewRequest(&process.SendInputRequest{
		Process: sel, Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: []byte(text)}}})))
	return err
}

// Connect streams from the moment of connecting: the output before it is
// not repeated, the output after it and the end arrive, and the stream
// that started the process gets everything.
func TestConnectFromNow(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	first, err := a.pc.Start(ctxLong(t), withStdin(startReq("echo before; read x; echo after $x")))
	if err != nil {
		t.Fatal(err)
	}
	connected := make(chan run, 1)
	started := collect(first, func(r *run, ev *process.ProcessEvent) {
		if !bytes.Equal(r.stdout, []byte("before\n")) || ev.GetData() == nil {
			return
		}
		c, err := a.pc.Connect(ctxLong(t), authed(connect.NewRequest(&process.ConnectRequest{Process: byPid(r.pid)})))
		if err != nil {
			t.Error(err)
			return
		}
		// The start event says the connection is made; input only then.
		if !c.Receive() || c.Msg().GetEvent().GetStart().GetPid() != r.pid {
			t.Errorf("Connect's first event %v, %v", c.Msg(), c.Err())
			return
		}
		go func() { connected <- collectFrom(c, run{pid: r.pid}, false, nil) }()
		if err := sendStdin(t, a, byPid(r.pid), "x\n"); err != nil {
			t.Error(err)
		}
	})
	if string(started.stdout) != "before\nafter x\n" || started.end.GetExitCode() != 0 || started.err != nil {
		t.Fatalf("starting stream: %q %v %v", started.stdout, started.end, started.err)
	}
	later := <-connected
	if string(later.stdout) != "after x\n" || later.end.GetStatus() != "exit status 0" || later.err != nil {
		t.Fatalf("connected stream: %q %v %v", later.stdout, later.end, later.err)
	}
}

// Commands started natively are reachable here by pid and tag, and ones
// started here are native streams: listed, and attachable from offset 0.
func TestSurfacesShareProcesses(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	native, err := a.procs.Exec(proc.ExecOptions{Spec: proc.Spec{Argv: []string{"sh", "-c", "read x; echo native $x"}}, Stdin: true, Tag: "nat"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.pc.Connect(ctxLong(t), authed(connect.NewRequest(&process.ConnectRequest{Process: byTag("nat")})))
	if err != nil {
		t.Fatal(err)
	}
	r := collect(c, func(r *run, ev *process.ProcessEvent) {
		if ev.GetStart() != nil {
			if err := sendStdin(t, a, byPid(uint32(native.Pid)), "hi\n"); err != nil {
				t.Error(err)
			}
		}
	})
	if r.pid != uint32(native.Pid) || string(r.stdout) != "native hi\n" || r.end.GetExitCode() != 0 {
		t.Fatalf("native command through envd: pid %d (want %d) %q %v %v", r.pid, native.Pid, r.stdout, r.end, r.err)
	}

	tag := "mine"
	req := withStdin(startReq("echo envd; read x"))
	req.Msg.Tag = &tag
	s, err := a.pc.Start(ctxLong(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	pid := int(s.Msg().GetEvent().GetStart().GetPid())
	st := a.streams.Find(pid, "")
	if st == nil || st.Kind != stream.KindProcess || st.Tag != tag || !slices.Equal(st.Argv, []string{"/bin/bash", "-c", "echo envd; read x"}) {
		t.Fatalf("no native stream for pid %d: %+v", pid, st)
	}
	att, err := st.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	ctx := ctxLong(t)
	var out []byte
	for string(out) != "envd\n" {
		it, err := att.Next(ctx, nil, 1024)
		if err != nil || it.Kind != stream.ItemData {
			t.Fatalf("native attach: %+v %v", it, err)
		}
		out = append(out, it.Data...)
	}
	s.Close()
}

func TestList(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	list := func() map[uint32]*process.ProcessInfo {
		resp, err := a.pc.List(ctxLong(t), authed(connect.NewRequest(&process.ListRequest{})))
		if err != nil {
			t.Fatal(err)
		}
		m := map[uint32]*process.ProcessInfo{}
		for _, p := range resp.Msg.GetProcesses() {
			m[p.GetPid()] = p
		}
		return m
	}
	done, err := a.procs.Exec(proc.ExecOptions{Spec: proc.Spec{Argv: []string{"true"}}})
	if err != nil {
		t.Fatal(err)
	}
	<-done.Done()
	tag := "server"
	req := withStdin(startReq("read x"))
	req.Msg.Tag = &tag
	ctx, cancel := context.WithCancel(ctxLong(t))
	defer cancel()
	s, err := a.pc.Start(ctx, req)
	if err != nil || !s.Receive() {
		t.Fatal(err, s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	pty := authed(connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "cat"}, Pty: &process.PTY{Size: &process.PTY_Size{Cols: 80, Rows: 24}}}))
	ps, err := a.pc.Start(ctx, pty)
	if err != nil || !ps.Receive() {
		t.Fatal(err, ps.Err())
	}
	ptyPid := ps.Msg().GetEvent().GetStart().GetPid()
	w, err := a.fs.WatchDir(ctx, authed(connect.NewRequest(&filesystem.WatchDirRequest{Path: t.TempDir()})))
	if err != nil || !w.Receive() {
		t.Fatal(err, w.Err()) // the watch exists once its start event came
	}

	got := list()
	if len(got) != 2 || got[pid].GetTag() != tag || got[pid].GetConfig().GetCmd() != "/bin/bash" ||
		!slices.Equal(got[pid].GetConfig().GetArgs(), []string{"-c", "read x"}) || got[ptyPid].GetConfig().GetCmd() != "cat" || got[ptyPid].Tag != nil {
		t.Fatalf("list %v, want the command %d and the terminal %d only", got, pid, ptyPid)
	}
	if err := sendStdin(t, a, byPid(pid), "\n"); err != nil {
		t.Fatal(err)
	}
	collect(s, nil)
	if _, ok := list()[pid]; ok {
		t.Fatal("an ended command is still listed")
	}
}

// Every RPC that names a process refuses bad selectors the same way.
func TestSelectorErrors(t *testing.T) {
	t.Parallel()
	a := newAgent(t, agentOptions{})
	rpcs := map[string]func(sel *process.ProcessSelector) error{
		"Connect": func(sel *process.ProcessSelector) error {
			s, err := a.pc.Connect(ctxLong(t), authed(connect.NewRequest(&process.ConnectRequest{Process: sel})))
			if err != nil {
				return err
			}
			return collect(s, nil).err
		},
		"SendInput": func(sel *process.ProcessSelector) error { return sendStdin(t, a, sel, "x") },
		"SendSignal": func(sel *process.ProcessSelector) error {
			_, err := a.pc.SendSignal(ctxLong(t), authed(connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGTERM})))
			return err
		},
		"CloseStdin": func(sel *process.ProcessSelector) error {
			_, err := a.pc.CloseStdin(ctxLong(t), authed(connect.NewRequest(&process.CloseStdinRequest{Process: sel})))
			return err
		},
		"Update": func(sel *process.ProcessSelector) error {
			_, err := a.pc.Update(ctxLong(t), authed(connect.NewRequest(&process.UpdateRequest{Process: sel})))
			return err
		},
	}
	for name, rpc := range rpcs {
		for _, c := range []struct {
			sel   *process.ProcessSelector
			code  connect.Code
			words string
		}{
			{nil, connect.CodeInvalidArgument, "pid or a tag"},
			{byPid(0), connect.CodeInvalidArgument, "pid"},
			{byPid(1 << 30), connect.CodeNotFound, "1073741824"},
			{byTag(""), connect.CodeInvalidArgument, "tag"},
			{byTag("nobody-has-it"), connect.CodeNotFound, "nobody-has-it"},
		} {
			err := rpc(c.sel)
			if err == nil {
				t.Fatalf("%s(%v) succeeded", name, c.sel)
			}
			wantCode(t, err, c.code, c.words)
		}
	}
}
