package client_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/rayito/rayito-agent/client"
)

func TestExecExitCodesAndOutput(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	cases := []struct {
		name           string
		o              client.ExecOptions
		code           int
		stdout, stderr string
	}{
		{"true", client.ExecOptions{Argv: []string{"true"}}, 0, "", ""},
		{"false", client.ExecOptions{Argv: []string{"false"}}, 1, "", ""},
		{"echo", client.ExecOptions{Argv: []string{"echo", "hello", "world"}}, 0, "hello world\n", ""},
		{"shell", client.ExecOptions{Cmd: "echo out; echo err >&2; exit 7"}, 7, "out\n", "err\n"},
		{"env and cwd", client.ExecOptions{Argv: sh(`echo "$FOO $(pwd)"`), Env: map[string]string{"FOO": "bar"}, Cwd: "/tmp"}, 0, "bar /tmp\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, c, tc.o)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.status.Code == nil || *r.status.Code != tc.code || r.status.Signal != "" {
				t.Errorf("status %s, want exit code %d", code(r.status), tc.code)
			}
			if string(r.stdout) != tc.stdout || string(r.stderr) != tc.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", r.stdout, r.stderr, tc.stdout, tc.stderr)
			}
		})
	}
}

// TestLargeOutputExact: 100 MiB of random output arrive byte for byte: the
// sha256 computed in the sandbox (sent on stderr) matches the client's.
func TestLargeOutputExact(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"bash", "-c", "head -c 104857600 /dev/urandom | tee >(sha256sum >&2)"}})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	var stderr []byte
	var errErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		stderr, errErr = io.ReadAll(p.Stderr())
	}()
	n, err := io.Copy(h, p.Stdout())
	<-done
	if err != nil || errErr != nil {
		t.Fatal(err, errErr)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("wait: %s %v", code(st), err)
	}
	if n != 100<<20 {
		t.Fatalf("got %d bytes, want %d", n, 100<<20)
	}
	want, _, _ := strings.Cut(string(stderr), " ")
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("sha256 of what arrived %s, in the sandbox %q", got, stderr)
	}
}

// TestInterleavingPerChannel: alternating writes to stdout and stderr
// arrive in order on each channel.
func TestInterleavingPerChannel(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	r := run(t, c, client.ExecOptions{Argv: sh(`i=1; while [ $i -le 2000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done`)})
	if r.err != nil || r.status.ExitCode() != 0 {
		t.Fatalf("%s %v", code(r.status), r.err)
	}
	var wantOut, wantErr strings.Builder
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&wantOut, "out%d\n", i)
		fmt.Fprintf(&wantErr, "err%d\n", i)
	}
	if string(r.stdout) != wantOut.String() {
		t.Errorf("stdout out of order or incomplete: %d bytes, want %d", len(r.stdout), wantOut.Len())
	}
	if string(r.stderr) != wantErr.String() {
		t.Errorf("stderr out of order or incomplete: %d bytes, want %d", len(r.stderr), wantErr.Len())
	}
}

// TestStdinRoundTrip: a line goes through cat and back before stdin is
// closed, then a larger random payload, then EOF ends cat.
func TestStdinRoundTrip(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 5)
	if _, err := io.ReadFull(p.Stdout(), line); err != nil || string(line) != "ping\n" {
		t.Fatalf("echo of the first line: %q %v", line, err)
	}
	payload := make([]byte, 700<<10)
	rand.Read(payload)
	var got []byte
	var readErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		got, readErr = io.ReadAll(p.Stdout())
	}()
	if n, err := p.Write(payload); err != nil || n != len(payload) {
		t.Fatalf("write: %d %v", n, err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	<-done
	if err != nil || readErr != nil || st.ExitCode() != 0 {
		t.Fatalf("cat: %s %v %v", code(st), err, readErr)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("cat returned %d bytes, not the %d written", len(got), len(payload))
	}
}

// TestCallbacks: OnStdout and OnStderr get every byte in order and Wait
// returns only after they have.
func TestCallbacks(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	var mu sync.Mutex
	var out, errb bytes.Buffer
	p, err := c.Exec(ctx, client.ExecOptions{
		Argv:     sh(patternCmd(3<<20) + "; echo done >&2"),
		OnStdout: func(b []byte) { mu.Lock(); out.Write(b); mu.Unlock() },
		OnStderr: func(b []byte) { mu.Lock(); errb.Write(b); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.ExitCode() != 0 {
		t.Fatalf("%s %v", code(st), err)
	}
	mu.Lock()
	defer mu.Unlock()
	if out.Len() != 3<<20 || errb.String() != "done\n" {
		t.Fatalf("callbacks got %d bytes of stdout and %q", out.Len(), errb.String())
	}
	if err := checkPattern(out.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stdout().Read(make([]byte, 1)); !errors.Is(err, client.ErrCallbackOwnsOutput) {
		t.Fatalf("Stdout().Read with a callback: %v", err)
	}
}

// TestAttachByTagReplaysEndedProcess: a second client finds a finished
// command by tag and gets its whole output and exit status.
func TestAttachByTagReplaysEndedProcess(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c1 := a.dial(t, client.Options{})
	first := run(t, c1, client.ExecOptions{Argv: sh("echo replay me; exit 3"), Tag: "job-1"})
	if first.err != nil {
		t.Fatal(first.err)
	}
	c2 := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	p, err := c2.Attach(ctx, client.AttachOptions{Tag: "job-1"})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(ctx, p)
	if r.err != nil || string(r.stdout) != "replay me\n" || r.status.ExitCode() != 3 {
		t.Fatalf("replay: %q %s %v", r.stdout, code(r.status), r.err)
	}
	if p.Pid() == 0 {
		t.Error("attached process has no pid")
	}
	list, err := c2.List(ctx, client.KindProcess)
	if err != nil || len(list) != 1 || list[0].Tag != "job-1" || list[0].State != "ended" || list[0].End == nil || *list[0].End.ExitCode != 3 {
		t.Fatalf("list: %+v %v", list, err)
	}
}

func TestHealthAndTraffic(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	c := a.dial(t, client.Options{})
	ctx := ctxLong(t)
	h, err := c.Health(ctx)
	if err != nil || h.Status != "ok" || h.Version != "test" || h.ResumeGeneration != c.Generation() {
		t.Fatalf("health %+v %v", h, err)
	}
	before, err := c.Traffic(ctx)
	if err != nil || before.Connections != 1 {
		t.Fatalf("traffic %+v %v", before, err)
	}
	run(t, c, client.ExecOptions{Argv: []string{"echo", "counted"}})
	after, err := c.Traffic(ctx)
	if err != nil || after.BytesOut <= before.BytesOut || after.BytesIn <= before.BytesIn {
		t.Fatalf("traffic did not count the exec: %+v then %+v (%v)", before, after, err)
	}
	if _, err := client.GetHealth(ctx, a.url, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDetach: after Detach the reader ends with ErrDetached, the process
// runs on, and another attach picks it up.
func TestDetach(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh("echo started; read line; echo got $line"), Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(p.Stdout(), line); err != nil {
		t.Fatal(err)
	}
	if err := p.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(p.Stdout()); !errors.Is(err, client.ErrDetached) {
		t.Fatalf("read after detach: %v", err)
	}
	if _, err := p.Wait(ctx); !errors.Is(err, client.ErrDetached) {
		t.Fatalf("wait after detach: %v", err)
	}
	q, err := c.Attach(ctx, client.AttachOptions{Stream: p.Stream(), From: p.Cursors()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	r := collect(ctx, q)
	if r.err != nil || string(r.stdout) != "got x\n" || r.status.ExitCode() != 0 {
		t.Fatalf("after reattach: %q %s %v", r.stdout, code(r.status), r.err)
	}
}
