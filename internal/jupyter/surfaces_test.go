package jupyter

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// Tests of what the other surfaces (jupyter_server's API, the code
// interpreter) need from the manager.

func TestSpecs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	specDir := writeSpec(t, dir, "py", `{"argv": ["/bin/py", "{connection_file}"], "display_name": "Py", "language": "python", "metadata": {"debugger": true}}`)
	if err := os.WriteFile(filepath.Join(specDir, "logo-64x64.png"), []byte("png"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(specDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeSpec(t, dir, "bare", `{"argv": ["/bin/bare"]}`)
	writeSpec(t, dir, "broken", `{"argv": [`)
	m := NewManager(Options{Registry: env.reg, DataDirs: []string{dir}})
	specs := m.Specs()
	if len(specs) != 2 || specs[0].Name != "bare" || specs[1].Name != "py" {
		t.Fatalf("specs %+v, want bare and py (broken left out)", specs)
	}
	bare, py := specs[0], specs[1]
	if bare.DisplayName != "bare" || bare.InterruptMode != "signal" || string(bare.Metadata) != "{}" || bare.Env == nil || len(bare.Resources) != 0 {
		t.Fatalf("bare spec defaults: %+v", bare)
	}
	if py.DisplayName != "Py" || py.Language != "python" || !strings.Contains(string(py.Metadata), "debugger") {
		t.Fatalf("py spec %+v", py)
	}
	if got := py.ResourcePath("logo-64x64.png"); got != filepath.Join(specDir, "logo-64x64.png") {
		t.Fatalf("resource path %q", got)
	}
	for _, name := range []string{"kernel.json", "sub", "../kernel.json", "missing.png"} {
		if got := py.ResourcePath(name); got != "" {
			t.Fatalf("ResourcePath(%q) = %q, want none", name, got)
		}
	}
}

func TestKernelActivityAndConnections(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	if k.Language() != "python" {
		t.Fatalf("language %q", k.Language())
	}
	home, _ := os.UserHomeDir()
	if k.Cwd() != home && k.Cwd() != "/" {
		t.Fatalf("cwd %q, want the home directory", k.Cwd())
	}
	before := k.LastActivity()
	if k.Connections() != 0 {
		t.Fatalf("connections %d before any relay", k.Connections())
	}
	r1, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	if k.Connections() != 2 {
		t.Fatalf("connections %d with two relays", k.Connections())
	}
	r1.Control.(*Relay).Close()
	if k.Connections() != 1 {
		t.Fatalf("connections %d after closing one", k.Connections())
	}
	time.Sleep(10 * time.Millisecond) // so that activity has a later time to show
	_, end := run(t, k.ID(), "1")
	wantStatus(t, end, StatusOK)
	if !k.LastActivity().After(before) {
		t.Fatalf("last activity %v did not move past %v", k.LastActivity(), before)
	}
	r2.Control.(*Relay).Close()
}

func TestKernelCwd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	k, err := env.mgr.Start(ctx, StartOptions{Cwd: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer env.mgr.Shutdown(context.Background(), k.ID())
	if k.Cwd() != dir {
		t.Fatalf("cwd %q, want %q", k.Cwd(), dir)
	}
	evs, _ := run(t, k.ID(), "import os; print(os.getcwd())")
	if got := strings.TrimSpace(stdout(evs)); got != dir {
		t.Fatalf("kernel runs in %q, want %q", got, dir)
	}
}

func TestExecuteEnvForOneCell(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	evs, end := run(t, k.ID(), "import os; os.environ['KEEP'] = 'old'")
	wantStatus(t, end, StatusOK)

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	env1 := map[string]string{"KEEP": "new", "FRESH": `quote" back\ <tag> é`}
	s, _, err := env.mgr.ExecuteWith(ctx, k.ID(), "print(os.environ['KEEP'], os.environ['FRESH'])", ExecuteOptions{Env: env1})
	if err != nil {
		t.Fatal(err)
	}
	evs, end = attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	if got := stdout(evs); got != "new "+env1["FRESH"]+"\n" {
		t.Fatalf("the cell saw %q", got)
	}
	count := *end.ExecutionCount

	evs, end = run(t, k.ID(), "print(os.environ['KEEP'], os.environ.get('FRESH', 'unset'))")
	wantStatus(t, end, StatusOK)
	if got := stdout(evs); got != "old unset\n" {
		t.Fatalf("after the cell the environment is %q, want it restored", got)
	}
	if *end.ExecutionCount != count+1 {
		t.Fatalf("execution count %d after %d: setting the environment counted as an execution", *end.ExecutionCount, count)
	}
	evs, _ = run(t, k.ID(), "print(sorted(n for n in dir() if 'rayito' in n), hasattr(os, '_rayito_saved_env'))")
	if got := stdout(evs); got != "[] False\n" {
		t.Fatalf("the cell's environment left traces: %q", got)
	}
}

func TestExecuteEnvErrors(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for _, bad := range []map[string]string{{"": "x"}, {"A=B": "x"}, {"A": "nul\x00"}} {
		_, _, err := env.mgr.ExecuteWith(ctx, k.ID(), "1", ExecuteOptions{Env: bad})
		wantCode(t, err, "bad_request")
	}

	// A kernel of another language cannot take Python code for its
	// environment.
	m := NewManager(Options{Registry: env.reg})
	k2 := newKernel(m, "k1", &kernelspec{Name: "sh", Language: "bash"}, StartOptions{})
	defer k2.shutdown(context.Background())
	_, err := k2.enqueue("echo", ExecuteOptions{Env: map[string]string{"A": "1"}}, "")
	wantCode(t, err, "bad_request")
}

func TestRelayMsgBothWays(t *testing.T) {
	t.Parallel()
	k := sharedKernel(t)
	rs, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	relay := rs.Control.(*Relay)
	defer relay.Close()
	msgID := "msg-" + newID()
	err = relay.SendMsg(context.Background(), Msg{
		Channel: "shell", Header: json.RawMessage(`{"msg_type":"kernel_info_request","msg_id":"` + msgID + `","session":"client-session"}`),
		Parent: json.RawMessage(`{}`), Metadata: json.RawMessage(`{}`), Content: json.RawMessage(`{}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := rs.Attach(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for {
		it, err := a.Next(ctx, nil, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if it.Kind != stream.ItemEvent {
			t.Fatalf("item %+v", it)
		}
		m, err := DecodeMsg(it.Data)
		if err != nil {
			t.Fatal(err)
		}
		var parent struct {
			MsgID   string `json:"msg_id"`
			Session string `json:"session"`
		}
		json.Unmarshal(m.Parent, &parent)
		if m.Channel != "shell" || parent.MsgID != msgID {
			continue
		}
		if parent.Session != "client-session" {
			t.Fatalf("the kernel saw session %q, want the client's", parent.Session)
		}
		if !strings.Contains(string(m.Header), "kernel_info_reply") {
			t.Fatalf("reply %s", m.Header)
		}
		break
	}

	var m Msg
	if err := json.Unmarshal([]byte(`{"channel":"iopub","buffers":["%%"]}`), &m); err == nil {
		t.Fatal("bad base64 decoded")
	}
	if err := json.Unmarshal([]byte(`{"channel":"iopub","header":{},"buffers":["AAEC"]}`), &m); err != nil || len(m.Buffers) != 1 || string(m.Buffers[0]) != "\x00\x01\x02" {
		t.Fatalf("buffers %v, %v", m.Buffers, err)
	}
	wantCode(t, relay.SendMsg(context.Background(), Msg{Channel: "iopub", Header: json.RawMessage(`{"msg_type":"x"}`)}), "bad_request")
}
