package freezetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// pauseFor is how long a simulated pause lasts: long enough for output
// and file events to pile up, well within the agent's 30 s grace.
const pauseFor = 1500 * time.Millisecond

// Programs that produce numbered output across a pause.
const (
	counterScript = `i=0; while :; do i=$((i+1)); echo c$i; sleep 0.01; done`
	ptyScript     = `for i in $(seq 1 100000); do echo p$i; sleep 0.01; done`
	slowCell      = "import time\nfor i in range(400):\n    print(i, flush=True)\n    time.sleep(0.01)\n"
	cellLines     = 400
)

// reconnects records the generations the client reconnected at.
type reconnects chan uint64

func (r reconnects) wait(t testing.TB, gen uint64) {
	t.Helper()
	deadline := time.After(waitLong)
	for {
		select {
		case g := <-r:
			if g == gen {
				return
			}
			if g > gen {
				t.Fatalf("reconnected at generation %d, want %d", g, gen)
			}
		case <-deadline:
			t.Fatalf("the client did not reconnect at generation %d", gen)
		}
	}
}

// dialCounted dials a client that reports its reconnects.
func dialCounted(t testing.TB, a *agent) (*client.Client, reconnects) {
	rc := make(reconnects, 16)
	return a.dial(t, client.Options{OnReconnect: func(gen uint64) { rc <- gen }}), rc
}

// pauseAndResume pauses as a host does (/v1/pause, then the agent's
// tree frozen for pauseFor), thaws it and tells the agent. It returns the resume's answer once c
// is connected again: a call c makes before it noticed the cut would go
// to the closing connection.
func pauseAndResume(t testing.TB, a *agent, c *client.Client, rc reconnects, id string, during func()) client.Health {
	t.Helper()
	// The host quiesces the sandbox first, as before every snapshot.
	hostPause(t, a, client.PauseOptions{})
	a.pause(t)
	if during != nil {
		during()
	}
	time.Sleep(pauseFor)
	a.unpause(t)
	h, err := c.Resume(ctxLong(t), client.ResumeOptions{ResumeID: id})
	if err != nil {
		t.Fatalf("resume %s: %v", id, err)
	}
	rc.wait(t, h.ResumeGeneration)
	return h
}

// TestPauseDeliversEverythingOnce: a command, a terminal, a recursive
// watch and a cell are all producing when the VM pauses; after the resume
// the client reattaches and has every byte and event exactly once.
func TestPauseDeliversEverythingOnce(t *testing.T) {
	t.Parallel()
	a := startAgent(t, agentConfig{})
	c, rc := dialCounted(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLong)
	defer cancel()

	// The kernel first: it is the slowest to start.
	k := c.DefaultKernel()
	if ex, err := k.Execute(ctx, "import time", client.ExecuteOptions{}); err != nil || ex.Status != client.StatusOK {
		t.Fatalf("first cell: %+v, %v", ex, err)
	}

	cmd, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"sh", "-c", counterScript}})
	if err != nil {
		t.Fatal(err)
	}
	cmdLines := newCounterLines("c", 1)
	cmdDone := make(chan error, 1)
	go func() { cmdDone <- cmdLines.drain(cmd.Stdout()) }()

	pty, err := c.PTY(ctx, client.PTYOptions{Argv: []string{"bash", "-c", ptyScript}})
	if err != nil {
		t.Fatal(err)
	}
	ptyLines := newCounterLines("p", 1)
	ptyDone := make(chan error, 1)
	go func() { ptyDone <- ptyLines.drain(pty.Output()) }()

	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, root, true)
	if err != nil {
		t.Fatal(err)
	}
	fs := follow(ctx, w)
	maker := makeFiles(root, 15*time.Millisecond)
	defer maker.finish()

	eventually(t, "the command, the terminal and the watch produce", func() bool {
		made := maker.paths()
		return cmdLines.last() > 30 && ptyLines.last() > 30 && len(made) > 10 && fs.seen(made[9]) > 0
	})

	cellOut := newCounterLines("", 0)
	cell, err := k.Run(ctx, slowCell, client.ExecuteOptions{OnStdout: func(s string) { cellOut.Write([]byte(s)) }})
	if err != nil {
		t.Fatal(err)
	}
	cellDone := make(chan error, 1)
	var ex *client.Execution
	go func() {
		var err error
		ex, err = cell.Wait(ctx)
		cellDone <- err
	}()

	// The pause comes early in the cell, which takes at least 4 s.
	eventually(t, "the cell prints", func() bool { return cellOut.last() > 20 })

	var frozenAt [3]int
	h := pauseAndResume(t, a, c, rc, "pause-1", func() {
		frozenAt = [3]int{cmdLines.last(), ptyLines.last(), cellOut.last()}
	})
	if h.ResumeGeneration != 1 || h.KernelStateLost {
		t.Fatalf("resume answered %+v, want generation 1 and no kernel lost", h)
	}
	afterResume := maker.paths()
	eventually(t, "everything produces after the resume", func() bool {
		return cmdLines.last() > frozenAt[0]+100 && ptyLines.last() > frozenAt[1]+100 &&
			fs.seen(afterResume[len(afterResume)-1]) > 0 || fs.failure() != nil
	})
	if err := fs.failure(); err != nil {
		t.Fatalf("watch: %v", err)
	}

	select {
	case err := <-cellDone:
		if err != nil || ex.Status != client.StatusOK {
			t.Fatalf("cell: %+v, %v", ex, err)
		}
	case <-ctx.Done():
		t.Fatalf("the cell did not finish: %d lines", cellOut.last())
	}
	if err := cellOut.check(); err != nil || cellOut.last() != cellLines-1 {
		t.Fatalf("cell stdout: %v after %d", err, cellOut.last())
	}
	if want := cellText(); ex.Stdout != want {
		t.Fatalf("cell stdout is not 0 to 399 once each: %d bytes, want %d", len(ex.Stdout), len(want))
	}

	made, err := maker.finish()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "every create event arrived", func() bool {
		return fs.seen(made[len(made)-1]) > 0 || fs.failure() != nil
	})
	// Let duplicates, if any, arrive before the watch ends.
	time.Sleep(200 * time.Millisecond)
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-fs.done
	if err := fs.check(made); err != nil {
		t.Fatalf("watch: %v", err)
	}

	for _, s := range []struct {
		name  string
		sig   func() error
		wait  func() (client.ExitStatus, error)
		done  chan error
		lines *counterLines
		gaps  func() []client.GapError
	}{
		{"command", func() error { return cmd.Signal(ctx, client.SIGKILL) }, func() (client.ExitStatus, error) { return cmd.Wait(ctx) }, cmdDone, cmdLines, cmd.Gaps},
		{"terminal", func() error { return pty.Signal(ctx, client.SIGKILL) }, func() (client.ExitStatus, error) { return pty.Wait(ctx) }, ptyDone, ptyLines, pty.Gaps},
	} {
		if err := s.sig(); err != nil {
			t.Fatalf("%s: signal: %v", s.name, err)
		}
		if st, err := s.wait(); err != nil || st.Signal != client.SIGKILL {
			t.Fatalf("%s: %v, %v", s.name, st, err)
		}
		if err := <-s.done; err != nil {
			t.Fatalf("%s: reading: %v", s.name, err)
		}
		if err := s.lines.check(); err != nil {
			t.Fatalf("%s: %v (frozen at %v)", s.name, err, frozenAt)
		}
		if g := s.gaps(); len(g) != 0 {
			t.Fatalf("%s: gaps %v", s.name, g)
		}
		t.Logf("%s: %d lines, exactly once each", s.name, s.lines.last())
	}
	if g := cell.Gaps(); len(g) != 0 {
		t.Fatalf("cell: gaps %v", g)
	}
	if g := w.Gaps(); len(g) != 0 {
		t.Fatalf("watch: gaps %v", g)
	}
	t.Logf("watch: %d entries created, one create event each; frozen at %v", len(made), frozenAt)
	if gen := c.Generation(); gen != 1 {
		t.Fatalf("client generation %d, want 1", gen)
	}
}

// cellText is what slowCell prints.
func cellText() string {
	var b strings.Builder
	for i := range cellLines {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}
