package client_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rayito/rayito-agent/client"
)

// progress counts what a reader has seen, so a test can act once every
// reader is in the middle of its stream.
type progress struct {
	mu   sync.Mutex
	n    int
	wait chan struct{}
	at   int
}

func newProgress(at int) *progress { return &progress{at: at, wait: make(chan struct{})} }

func (p *progress) add(k int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += k
	if p.n >= p.at && p.at > 0 {
		p.at = 0
		close(p.wait)
	}
}

// TestResumeKeepsEveryHandle: a host resume (POST /v1/resume through
// client.Resume) closes the client's connection with 4000 in the middle
// of a terminal loop, a watch burst and a slowly printing cell. Each
// handle goes on after the reconnect with nothing lost or doubled.
func TestResumeKeepsEveryHandle(t *testing.T) {
	t.Parallel()
	const n = 300
	a := newAgent(t)
	var reconnects atomic.Int32
	c := a.dial(t, client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxKernel(t)

	// The terminal prints n numbered lines, slowly.
	term, err := c.PTY(ctx, client.PTYOptions{Argv: sh(fmt.Sprintf("for i in $(seq 1 %d); do echo line$i; sleep 0.01; done", n))})
	must(t, err)
	// The watch sees n files appear, slowly.
	dir := t.TempDir()
	w, err := c.Watch(ctx, dir, false)
	must(t, err)
	maker, err := c.Exec(ctx, client.ExecOptions{Argv: sh(fmt.Sprintf("cd %s && for i in $(seq 1 %d); do : > f$i; sleep 0.01; done", dir, n))})
	must(t, err)
	// The cell prints n lines, slowly.
	cell, err := c.DefaultKernel().Run(ctx, fmt.Sprintf("import time\nfor i in range(%d):\n    print(i, flush=True)\n    time.sleep(0.01)", n), client.ExecuteOptions{})
	must(t, err)

	started := []*progress{newProgress(n / 5), newProgress(n / 5), newProgress(n / 5)}
	// Each reader closes its done when it stops, so a reader that fails
	// before the resume fails the test at once instead of leaving it
	// waiting for progress that never comes.
	done := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	var wg sync.WaitGroup
	var termOut []byte
	var termErr, watchErr, makerErr error
	created := map[string]int{}
	var ex *client.Execution
	var cellErr error
	wg.Add(4)
	go func() {
		defer wg.Done()
		defer close(done[0])
		var buf bytes.Buffer
		_, termErr = io.Copy(io.MultiWriter(&buf, writerFunc(func(b []byte) { started[0].add(bytes.Count(b, []byte("\n"))) })), term.Output())
		termOut = buf.Bytes()
	}()
	go func() {
		defer wg.Done()
		defer close(done[1])
		for len(created) < n {
			ev, err := w.Next(ctx)
			if err != nil {
				watchErr = err
				return
			}
			if ev.Seq != w.Cursors()["events"] {
				watchErr = fmt.Errorf("event seq %d after %d", ev.Seq, w.Cursors()["events"])
				return
			}
			if ev.Op == "create" {
				created[filepath.Base(ev.Path)]++
				started[1].add(1)
			}
		}
	}()
	go func() {
		defer wg.Done()
		r := collect(ctx, maker)
		makerErr = r.err
	}()
	go func() {
		defer wg.Done()
		defer close(done[2])
		for {
			ev, err := cell.Next(ctx)
			if err == io.EOF {
				ex, cellErr = cell.Wait(ctx)
				return
			}
			if err != nil {
				cellErr = err
				return
			}
			started[2].add(strings.Count(ev.Text, "\n"))
		}
	}()
	for i, p := range started {
		select {
		case <-p.wait:
		case <-done[i]:
			select {
			case <-p.wait: // it got far enough, then finished
			default: // its own error is set before done closes
				switch i {
				case 0:
					t.Fatalf("the terminal reader stopped before the resume: %v", termErr)
				case 1:
					t.Fatalf("the watch reader stopped before the resume: %v", watchErr)
				default:
					t.Fatalf("the cell reader stopped before the resume: %v", cellErr)
				}
			}
		}
	}
	h, err := c.Resume(ctx, client.ResumeOptions{ResumeID: "resume-1"})
	if err != nil || h.ResumeGeneration != 1 || h.LastResume == nil || h.LastResume.ResumeID != "resume-1" {
		t.Fatalf("resume: %+v %v", h, err)
	}
	// A retry of the same resume is the same answer, not another resume.
	if h2, err := c.Resume(ctx, client.ResumeOptions{ResumeID: "resume-1"}); err != nil || h2.ResumeGeneration != 1 {
		t.Fatalf("repeated resume: %+v %v", h2, err)
	}
	wg.Wait()

	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "line%d\r\n", i)
	}
	if termErr != nil || string(termOut) != want.String() {
		t.Errorf("terminal: %v; got %d bytes, want %d", termErr, len(termOut), want.Len())
	}
	if st, err := term.Wait(ctx); err != nil || st.ExitCode() != 0 || len(term.Gaps()) != 0 {
		t.Errorf("terminal: %v %v, gaps %v", st, err, term.Gaps())
	}
	if watchErr != nil || makerErr != nil {
		t.Errorf("watch: %v, file maker: %v", watchErr, makerErr)
	}
	for i := 1; i <= n; i++ {
		if k := created[fmt.Sprintf("f%d", i)]; k != 1 {
			t.Errorf("f%d: %d create events", i, k)
		}
	}
	want.Reset()
	for i := range n {
		fmt.Fprintf(&want, "%d\n", i)
	}
	switch {
	case cellErr != nil || ex == nil:
		t.Errorf("cell: %v", cellErr)
	case ex.Status != client.StatusOK || ex.Stdout != want.String():
		t.Errorf("cell: status %s, %d bytes of stdout, want %d", ex.Status, len(ex.Stdout), want.Len())
	}
	if reconnects.Load() < 1 || c.Generation() != 1 {
		t.Errorf("%d reconnects, generation %d", reconnects.Load(), c.Generation())
	}
	if len(w.Gaps())+len(cell.Gaps()) != 0 {
		t.Errorf("gaps: %v %v", w.Gaps(), cell.Gaps())
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(b); return len(b), nil }

// TestInitAndHost: Init sets the environment of later commands and a new
// token; the client goes on with the new token, an old one is refused,
// and bad bodies get 400 bad_request.
func TestInitAndHost(t *testing.T) {
	t.Parallel()
	a := newAgent(t)
	proxy := newTCPProxy(t, a.http.Listener.Addr().String())
	var reconnects atomic.Int32
	c := dialURL(t, proxy.url(), client.Options{OnReconnect: func(uint64) { reconnects.Add(1) }})
	ctx := ctxLong(t)
	cwd := t.TempDir()
	h, err := c.Init(ctx, client.InitOptions{Env: map[string]string{"GREETING": "hola"}, DefaultCwd: cwd, MaxIdleSeconds: 600, TimeUnixNs: 1})
	if err != nil || h.Status != "ok" {
		t.Fatalf("init: %+v %v", h, err)
	}
	r := run(t, c, client.ExecOptions{Argv: sh("echo $GREETING; pwd")})
	if string(r.stdout) != "hola\n"+cwd+"\n" {
		t.Fatalf("after init: %q %v", r.stdout, r.err)
	}
	for _, bad := range []client.InitOptions{{MaxIdleSeconds: 10}, {DefaultCwd: "/no/such/dir"}, {DefaultUser: "no-such-user-rayito"}, {Env: map[string]string{"A=B": "c"}}} {
		if _, err := c.Init(ctx, bad); !client.HasCode(err, client.CodeBadRequest) {
			t.Errorf("init %+v: %v, want bad_request", bad, err)
		}
	}
	if _, err := c.Resume(ctx, client.ResumeOptions{TimeUnixNs: -1}); !client.HasCode(err, client.CodeBadRequest) {
		t.Errorf("resume with a negative time: %v", err)
	}

	if _, err := c.Init(ctx, client.InitOptions{AccessToken: "new-token"}); err != nil {
		t.Fatal(err)
	}
	old := client.Host{URL: a.url, Token: testToken}
	if _, err := old.Init(ctx, client.InitOptions{}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("init with the old token: %v", err)
	}
	if _, err := client.Dial(ctx, a.url, client.Options{Token: testToken}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("dial with the old token: %v", err)
	}
	// The client redials with the new token.
	proxy.cut()
	eventually(t, "reconnected", func() bool { return reconnects.Load() == 1 })
	if r := run(t, c, client.ExecOptions{Argv: []string{"echo", "still"}}); string(r.stdout) != "still\n" {
		t.Fatalf("after the new token: %q %v", r.stdout, r.err)
	}
	host := client.Host{URL: a.url, Token: "new-token"}
	if h, err := host.Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("host health: %+v %v", h, err)
	}
	if h, err := host.Resume(ctx, client.ResumeOptions{}); err != nil || h.ResumeGeneration != 1 {
		t.Fatalf("host resume: %+v %v", h, err)
	}
}
