package jupyter

import (
	"context"
	"encoding/json"
	"os/user"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/proc/proctest"

	"github.com/rayito/rayito-agent/internal/stream"
)

// TestCheckWaitsOnStoppedKernel: a stopped kernel (a restored VM's kernel
// slow to run again, in life) is alive: the check reports it slow, never
// lost, within its bound; a cell sent meanwhile waits for it, and once it
// answers it is alive with its state. Not parallel: Check probes every
// kernel, and a busy machine must not make the other tests' kernels slow.
func TestCheckWaitsOnStoppedKernel(t *testing.T) {
	k := startKernel(t)
	live := startKernel(t)
	ctx := t.Context()
	run(t, k.ID(), "kept = 42")
	pid := k.Info().Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	defer syscall.Kill(pid, syscall.SIGCONT)

	began := time.Now()
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	res := env.mgr.Check(cctx)
	cancel()
	took := time.Since(began)
	if !slices.Contains(res.Slow, k.ID()) || !slices.Contains(res.Alive, live.ID()) || len(res.Lost) > 0 {
		t.Fatalf("check: %+v; want %s slow and %s alive, none lost", res, k.ID(), live.ID())
	}
	// Seconds over the bound leave room for a loaded machine while
	// still catching a check that waits on the stopped kernel.
	if took > 5*time.Second {
		t.Fatalf("check took %v", took)
	}
	if st := k.Info().State; st != StateSlow {
		t.Fatalf("state %s, want slow", st)
	}
	// A cell waits for the slow kernel rather than being refused.
	s, _, err := env.mgr.Execute(ctx, k.ID(), "kept", 0, false)
	if err != nil {
		t.Fatalf("a cell for a slow kernel: %v", err)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	evs, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	if res, _ := find(evs, "result"); res.text("text/plain") != "42" {
		t.Fatalf("after it answered: %+v", evs)
	}
	waitState(t, k.ID(), StateIdle)
	if res := env.mgr.Check(ctx); !slices.Contains(res.Alive, k.ID()) {
		t.Fatalf("after SIGCONT: %+v", res)
	}

	// Shutdown ends the kernel's streams with reason closed.
	rs, err := env.mgr.Channels(k.ID())
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := execute(t, k.ID(), "import time\ntime.sleep(600)", 0, false)
	if err := env.mgr.Shutdown(ctx, k.ID()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*stream.Stream{cs, rs} {
		if end := s.Ended(); end == nil || end.Reason != stream.ReasonClosed {
			t.Fatalf("stream %d (%s) end %+v, want closed", s.ID, s.Kind, end)
		}
	}
	_, err = env.mgr.Get(k.ID())
	wantCode(t, err, "not_found")
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("kernel process %d still exists after shutdown: %v", pid, err)
	}
}

// TestSlowKernelLostOnlyAfterItsBound: a kernel that stays stopped past
// the slow bound is lost then, and the manager says so (OnLost); one
// killed is dead at once.
func TestSlowKernelLostOnlyAfterItsBound(t *testing.T) {
	t.Parallel()
	lost := make(chan string, 4)
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper, OnLost: func(id string) { lost <- id }})
	m.slowBound = 2 * time.Second
	defer m.Close()
	start := func() *Kernel {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		k, err := m.Start(ctx, StartOptions{Name: DefaultKernel})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	stopped, killed := start(), start()
	pid := stopped.Info().Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	waitStopped(t, pid)
	defer syscall.Kill(pid, syscall.SIGCONT)
	syscall.Kill(killed.Info().Pid, syscall.SIGKILL)
	waitStateOn(t, m, killed.ID(), StateDead)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	res := m.Check(ctx)
	cancel()
	if !slices.Equal(res.Slow, []string{stopped.ID()}) || !slices.Equal(res.Dead, []string{killed.ID()}) {
		t.Fatalf("check: %+v; want %s slow, %s dead", res, stopped.ID(), killed.ID())
	}
	select {
	case id := <-lost:
		if id != stopped.ID() {
			t.Fatalf("OnLost for %s", id)
		}
	case <-time.After(waitFor):
		t.Fatal("a kernel stopped past the slow bound was never called lost")
	}
	if st := stopped.Info().State; st != StateLost {
		t.Fatalf("state %s, want lost", st)
	}
}

func TestInterruptAndTimeout(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	s, _ := execute(t, k.ID(), "print('spinning', flush=True)\nwhile True:\n    pass", 0, false)
	r := attach(t, s, 0)
	r.untilStdout("spinning\n")
	if err := env.mgr.Interrupt(k.ID()); err != nil {
		t.Fatal(err)
	}
	r.within = answerBound // an interrupt that never arrived fails here
	evs, end := r.all()
	wantStatus(t, end, StatusError)
	if e, ok := find(evs, "error"); !ok || e.Name != "KeyboardInterrupt" {
		t.Fatalf("want KeyboardInterrupt, got %+v", evs)
	}

	s, _ = execute(t, k.ID(), "import time\ntime.sleep(600)", 3*time.Second, false)
	r = attach(t, s, 0)
	r.within = 3*time.Second + answerBound
	_, end = r.all()
	wantStatus(t, end, StatusAborted)
	if !strings.Contains(end.Message, "timed out") {
		t.Fatalf("end message %q", end.Message)
	}
	// The kernel is usable again.
	evs, end = run(t, k.ID(), "20 + 22")
	wantStatus(t, end, StatusOK)
	if res, _ := find(evs, "result"); res.text("text/plain") != "42" {
		t.Fatalf("after the timeout: %+v", evs)
	}
}

func TestKilledKernelIsDeadUntilRestarted(t *testing.T) {
	t.Parallel()
	k := startKernel(t)
	s, _ := execute(t, k.ID(), "import time\nprint('sleeping', flush=True)\ntime.sleep(600)", 0, false)
	r := attach(t, s, 0)
	r.untilStdout("sleeping\n")
	queued, _ := execute(t, k.ID(), "print('never')", 0, false)
	pid := k.Info().Pid
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	evs, end := r.all()
	wantStatus(t, end, StatusError)
	if !strings.Contains(end.Message, "died") {
		t.Fatalf("end message %q does not say the kernel died", end.Message)
	}
	if e, ok := find(evs, "error"); !ok || !strings.Contains(e.Value, "SIGKILL") {
		t.Fatalf("want an error event naming SIGKILL, got %+v", evs)
	}
	_, qend := attach(t, queued, 0).all()
	wantStatus(t, qend, StatusAborted)
	waitState(t, k.ID(), StateDead)
	_, _, err := env.mgr.Execute(t.Context(), k.ID(), "1", 0, false)
	wantCode(t, err, "conflict")

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := env.mgr.Restart(ctx, k.ID()); err != nil {
		t.Fatal(err)
	}
	info := k.Info()
	if info.State == StateDead || info.Pid == pid || info.Pid == 0 {
		t.Fatalf("after restart: %+v (old pid %d)", info, pid)
	}
	evs, end = run(t, k.ID(), "'time' in dir()")
	wantStatus(t, end, StatusOK)
	if res, _ := find(evs, "result"); res.text("text/plain") != "False" {
		t.Fatalf("restarted kernel kept its state: %+v", evs)
	}
}

// TestSlowDefaultKernelIsKept: a default kernel that missed a short
// check (stopped here, slow after a restore in life) is slow, not lost,
// and keeps its variables; it is not replaced. Not parallel: it stops the
// shared default kernel.
func TestSlowDefaultKernelIsKept(t *testing.T) {
	s, id := execute(t, "", "kept = 7", 0, false)
	_, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	k, err := env.mgr.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	pid := k.Info().Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	res := env.mgr.Check(ctx)
	cancel()
	syscall.Kill(pid, syscall.SIGCONT)
	if !slices.Contains(res.Slow, id) {
		t.Fatalf("check of a stopped kernel: %+v; want %s slow", res, id)
	}
	s, again := execute(t, "", "kept", 0, false)
	evs, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	if again != id {
		t.Fatalf("the cell ran on %s, not on the default kernel %s that was slow", again, id)
	}
	if res, _ := find(evs, "result"); res.text("text/plain") != "7" {
		t.Fatalf("kept after the check: %+v", evs)
	}
	if st := k.Info().State; st == StateLost {
		t.Fatal("lost after answering")
	}
}

func TestDefaultKernelReplacedAfterDeath(t *testing.T) {
	t.Parallel()
	s, id := execute(t, "", "marker = 1", 0, false)
	t.Cleanup(func() { env.mgr.Shutdown(context.Background(), id) })
	_, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	s, again := execute(t, "", "marker", 0, false)
	if again != id {
		t.Fatalf("second cell ran on %s, first on %s", again, id)
	}
	attach(t, s, 0).all()

	k, err := env.mgr.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(k.Info().Pid, syscall.SIGKILL)
	waitState(t, id, StateDead)

	s, fresh := execute(t, "", "print('fresh')", 0, false)
	t.Cleanup(func() { env.mgr.Shutdown(context.Background(), fresh) })
	if fresh == id {
		t.Fatalf("cell ran on the dead kernel %s", id)
	}
	evs, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	if len(evs) == 0 || evs[0].Type != "stderr" || !strings.Contains(evs[0].Text, "kernel restarted") || !strings.Contains(evs[0].Text, id) {
		t.Fatalf("first event should say the default kernel was replaced: %+v", evs)
	}
	if stdout(evs) != "fresh\n" {
		t.Fatalf("stdout %q", stdout(evs))
	}
	evs, end = run(t, "", "marker")
	wantStatus(t, end, StatusError)
	if e, _ := find(evs, "error"); e.Name != "NameError" {
		t.Fatalf("new default kernel has old state: %+v", evs)
	}
}

func TestKernelAsUserInCwd(t *testing.T) {
	t.Parallel()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	k, err := env.mgr.Start(ctx, StartOptions{Name: DefaultKernel, User: "nobody", Cwd: "/tmp", Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.mgr.Shutdown(context.Background(), k.ID()) })
	evs, end := run(t, k.ID(), "import os\nprint(os.getuid(), os.getcwd(), os.environ['GREETING'])")
	wantStatus(t, end, StatusOK)
	if want := nobody.Uid + " /tmp hi\n"; stdout(evs) != want {
		t.Fatalf("stdout %q, want %q", stdout(evs), want)
	}
}

func TestInterruptByMessage(t *testing.T) {
	t.Parallel()
	std, err := findSpec(StandardDataDirs(), DefaultKernel)
	if err != nil {
		t.Fatal(err)
	}
	spec := map[string]any{"argv": std.Argv, "display_name": "message interrupts", "language": "python", "interrupt_mode": "message"}
	b, _ := json.Marshal(spec)
	dataDir := t.TempDir()
	writeSpec(t, dataDir, "py-msg", string(b))
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper, DataDirs: []string{dataDir}})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	k, err := m.Start(ctx, StartOptions{Name: "py-msg"})
	if err != nil {
		t.Fatal(err)
	}
	if inst, _ := k.current(); !inst.interruptMsg {
		t.Fatal("kernelspec interrupt_mode was not read")
	}
	s, _, err := m.Execute(ctx, k.ID(), "print('spinning', flush=True)\nwhile True:\n    pass", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	r := attach(t, s, 0)
	r.untilStdout("spinning\n")
	if err := m.Interrupt(k.ID()); err != nil {
		t.Fatal(err)
	}
	r.within = answerBound
	evs, end := r.all()
	wantStatus(t, end, StatusError)
	if e, ok := find(evs, "error"); !ok || e.Name != "KeyboardInterrupt" {
		t.Fatalf("want KeyboardInterrupt, got %+v", evs)
	}
}

// waitStopped waits until every thread of pid is stopped: a stop signal
// is delivered when each thread next runs, and a thread that runs first
// could still answer a check.
func waitStopped(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !proctest.Stopped(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBusyKernelStopsPolitely: restarting or shutting down a kernel whose
// cell loops interrupts the cell first, so the kernel exits on its
// shutdown_request instead of waiting that out and getting SIGTERM.
func TestBusyKernelStopsPolitely(t *testing.T) {
	t.Parallel()
	// A manager of the test's own, whose kernels have longer than the
	// agent's 2 s to exit on their shutdown_request: on a loaded machine
	// Python's exit alone can take that long, and this test is about
	// whether the kernel gets to exit politely, not how fast.
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper})
	m.politeStop = waitFor
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	k, err := m.Start(ctx, StartOptions{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"restart", "shutdown"} {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		s, _, err := m.Execute(ctx, k.ID(), "print('looping', flush=True)\nwhile True: pass", 0, false)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		// In the loop, not only busy: an interrupt that lands while the
		// kernel prepares the cell (busy already) can be spent before the
		// loop starts, which then runs on through the polite wait.
		attach(t, s, 0).untilStdout("looping\n")
		k.mu.Lock()
		inst := k.inst
		k.mu.Unlock()
		ctx, cancel = context.WithTimeout(context.Background(), waitFor)
		if op == "restart" {
			err = m.Restart(ctx, k.ID())
		} else {
			err = m.Shutdown(ctx, k.ID())
		}
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		<-inst.exited
		if w := inst.status.Wait; !inst.statusWasSeen || w.Signaled() {
			t.Errorf("%s of a busy kernel: it ended by %v (seen %v), not on its shutdown_request", op, describeExit(inst.status), inst.statusWasSeen)
		}
	}
}

// TestDeadKernelsTakeNoRoom: kernels whose process died do not count
// toward MaxKernels: with a bound of 2, two cells that end their kernel
// with os._exit leave room for the next cell's kernel. Restarting a dead
// kernel needs room like a start.
func TestDeadKernelsTakeNoRoom(t *testing.T) {
	t.Parallel()
	m := NewManager(Options{Registry: env.reg, Reaper: env.mgr.reaper, MaxKernels: 2})
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitFor)
	defer cancel()
	var dead []string
	for range 2 {
		s, id, err := m.Execute(ctx, "", "import os; os._exit(1)", 0, false)
		if err != nil {
			t.Fatalf("a cell on a new default kernel with %v dead: %v", dead, err)
		}
		attach(t, s, 0).all()
		waitStateOn(t, m, id, StateDead)
		dead = append(dead, id)
	}
	s, id, err := m.Execute(ctx, "", "1 + 1", 0, false)
	if err != nil {
		t.Fatalf("a cell with two dead kernels and a bound of 2: %v", err)
	}
	_, end := attach(t, s, 0).all()
	wantStatus(t, end, StatusOK)
	if _, err := m.Start(ctx, StartOptions{Name: DefaultKernel}); err != nil {
		t.Fatalf("a second live kernel: %v", err)
	}
	// Two live now: running a dead one again would make three.
	wantCode(t, m.Restart(ctx, dead[0]), "limit")
	if err := m.Shutdown(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(ctx, dead[0]); err != nil {
		t.Fatalf("restart of a dead kernel with room: %v", err)
	}
}
