package ptymux_test

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/ptymux"
	"github.com/rayito/rayito-agent/internal/wire"
)

// Resize, signal and input racing the program's exit either work or get
// conflict ("has ended"), never an internal error, and the stream ends.
func TestControlRacingExit(t *testing.T) {
	m := newManager(t)
	before := openFDs(t)
	for i := range 30 {
		tm := start(t, m, ptymux.Options{Argv: []string{"sh", "-c", "echo x; exit 3"}})
		var wg sync.WaitGroup
		check := func(what string, err error) {
			var we *wire.Error
			if err != nil && (!errors.As(err, &we) || we.Code != wire.CodeConflict) {
				t.Errorf("run %d: %s racing the exit: %v", i, what, err)
			}
		}
		stop := make(chan struct{})
		for range 3 {
			wg.Go(func() {
				for n := uint16(1); ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					check("resize", tm.p.Resize(80+n%50, 24))
					check("signal", tm.p.Signal(syscall.SIGWINCH, true))
					check("signal program", tm.p.Signal(syscall.SIGWINCH, false))
					check("input", tm.p.WriteInput([]byte("y")))
				}
			})
		}
		wantExit(t, tm.waitEnd(), 3)
		close(stop)
		wg.Wait()
		tm.a.Close()
	}
	waitFDs(t, before)
}

// Closing the manager from several goroutines while terminals run ends
// every stream once and returns in every caller.
func TestConcurrentCloseWithLivePTYs(t *testing.T) {
	m := newManager(t)
	var terms []*term
	for range 5 {
		tm := start(t, m, shell())
		tm.typ("echo r\"\"eady\r")
		tm.waitFor("ready\r\n")
		terms = append(terms, tm)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(m.Close)
	}
	wg.Wait()
	for _, tm := range terms {
		if e := tm.waitEnd(); e.Signal != "SIGHUP" {
			t.Fatalf("end %+v, want SIGHUP", e)
		}
	}
}

func waitFDs(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for openFDs(t) > want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := openFDs(t); got > want {
		t.Fatalf("%d descriptors open, %d before", got, want)
	}
}

// A background job that keeps writing after the shell exited does not keep
// the stream open, and what the shell wrote first is all there.
func TestBackgroundWriterAfterExit(t *testing.T) {
	t.Parallel()
	tm := start(t, newManager(t), ptymux.Options{Argv: []string{"bash", "--norc", "--noprofile", "-c",
		`trap '' HUP; (while :; do echo spam; sleep 0.01; done) & echo leader-done`}})
	// The job ignores the hangup and outlives the terminal, as a nohup job
	// does: the test ends it. Its group is the shell's and stays reserved
	// while the job lives.
	pgid := tm.p.Pid()
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	wantExit(t, tm.waitEnd(), 0)
	if !strings.Contains(string(tm.out), "leader-done\r\n") {
		t.Fatalf("output %q", tail(tm.out))
	}
}

// A user the program cannot run as (here: a cwd it may not enter) is a
// client error naming the problem, and leaves nothing open.
func TestUserThatCannotStart(t *testing.T) {
	m := newManager(t)
	before := openFDs(t)
	for range 20 {
		_, err := m.Start(ptymux.Options{Argv: []string{"true"}, User: "nobody", Cwd: "/root"})
		wantWireError(t, err, wire.CodeBadRequest, `as user "nobody" in "/root": permission denied`)
	}
	waitFDs(t, before)
}
