package jupyter

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// reseedNow runs Reseed on the test manager and returns what it said of k.
func reseedNow(t *testing.T, k *Kernel, bound time.Duration) (bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	ok, not := env.mgr.Reseed(ctx)
	if slices.Contains(ok, k.ID()) {
		return true, ""
	}
	for _, n := range not {
		if n.Kernel == k.ID() {
			return false, n.Reason
		}
	}
	t.Fatalf("Reseed said nothing of %s: %v %v", k.ID(), ok, not)
	return false, ""
}

// seeded returns the first n values of random.random() after
// random.seed(7), from a Python process of its own.
func seeded(t *testing.T, n int) []string {
	out, err := exec.Command("/usr/bin/python3", "-c", fmt.Sprintf("import random\nrandom.seed(7)\nfor _ in range(%d): print(repr(random.random()))", n)).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(out))
}

// TestReseedDuringRunningCell: a cell drawing random numbers in a loop
// draws from a new state once the kernel is reseeded mid-cell; the cell
// ends as it would have, with every line it printed and nothing else,
// and the kernel's execution count is unchanged.
func TestReseedDuringRunningCell(t *testing.T) {
	k := startKernel(t)
	_, end := run(t, k.ID(), "import random, time, tempfile\nrandom.seed(7)")
	wantStatus(t, end, StatusOK)
	count := k.Info().ExecutionCount
	const n = 40
	s, _ := execute(t, k.ID(), "for _ in range(40):\n    print(repr(random.random()), flush=True)\n    time.sleep(0.05)", 0, false)
	r := attach(t, s, 0)
	var got []string
	for len(got) < 3 { // the cell is running, and has drawn from the old state
		ev, e := r.next()
		if e != nil {
			t.Fatalf("cell ended early: %+v", *e)
		}
		got = append(got, strings.Fields(ev.Text)...)
	}
	if ok, why := reseedNow(t, k, answerBound); !ok {
		t.Fatalf("not reseeded: %s", why)
	}
	evs, e := r.all()
	wantStatus(t, e, StatusOK)
	for _, ev := range evs {
		if ev.Type != "stdout" {
			t.Fatalf("the cell got a %s event: the reseed must not show", ev.Type)
		}
		got = append(got, strings.Fields(ev.Text)...)
	}
	want := seeded(t, n)
	if len(got) != n {
		t.Fatalf("the cell printed %d numbers, want %d", len(got), n)
	}
	if got[0] != want[0] || got[n-1] == want[n-1] {
		t.Fatalf("want the seeded sequence at first and another after the reseed:\ngot  %v\nwant %v", got, want)
	}
	if c := k.Info().ExecutionCount; c != count+1 {
		t.Fatalf("execution count %d after one more cell, want %d", c, count+1)
	}
	evs, end = run(t, k.ID(), "print(tempfile._name_sequence is None)")
	wantStatus(t, end, StatusOK)
	if stdout(evs) != "True\n" {
		t.Fatalf("tempfile's name sequence was not reset: %q", stdout(evs))
	}
}

// TestReseedWhileWaitingForInput: a cell waiting in input() is not
// disturbed: it gets its answer after the reseed and ends as usual.
func TestReseedWhileWaitingForInput(t *testing.T) {
	k := startKernel(t)
	s, _ := execute(t, k.ID(), "name = input('name? ')\nprint('hello ' + name)", 0, true)
	r := attach(t, s, 0)
	if ev, end := r.next(); end != nil || ev.Type != "input_request" {
		t.Fatalf("want an input_request, got %+v %+v", ev, end)
	}
	if ok, why := reseedNow(t, k, answerBound); !ok {
		t.Fatalf("not reseeded: %s", why)
	}
	if err := env.mgr.InputReply(s.ID, "ada"); err != nil {
		t.Fatal(err)
	}
	evs, e := r.all()
	wantStatus(t, e, StatusOK)
	if stdout(evs) != "hello ada\n" {
		t.Fatalf("stdout %q", stdout(evs))
	}
}

// TestReseedNumpy: numpy's legacy global state is reseeded when numpy is
// imported.
func TestReseedNumpy(t *testing.T) {
	if exec.Command("/usr/bin/python3", "-c", "import numpy").Run() != nil {
		t.Skip("python3-numpy is not installed (make deps installs it)")
	}
	k := startKernel(t)
	code := "import numpy\nnumpy.random.seed(7)\nprint(repr(numpy.random.rand()))"
	evs, end := run(t, k.ID(), code)
	wantStatus(t, end, StatusOK)
	first := stdout(evs)
	_, end = run(t, k.ID(), "numpy.random.seed(7)")
	wantStatus(t, end, StatusOK)
	if ok, why := reseedNow(t, k, answerBound); !ok {
		t.Fatalf("not reseeded: %s", why)
	}
	evs, end = run(t, k.ID(), "print(repr(numpy.random.rand()))")
	wantStatus(t, end, StatusOK)
	if stdout(evs) == first {
		t.Fatalf("numpy drew %s again after the reseed", first)
	}
}

// TestReseedWhateverSignal41Does: user code that sets signal 41's
// handler (the default, which ends the process; its own; switching
// between them in a loop while resumes come) changes nothing: every
// reseed is acknowledged within the bound, and the kernel lives on. With
// a signal, the switching kernel was killed, and the one with a handler
// of its own made every resume wait the whole bound.
func TestReseedWhateverSignal41Does(t *testing.T) {
	k := startKernel(t)
	for _, code := range []string{
		"import signal\nsignal.signal(41, signal.SIG_DFL)",
		"signal.signal(41, lambda s, f: None)",
	} {
		_, end := run(t, k.ID(), code)
		wantStatus(t, end, StatusOK)
		if ok, why := reseedNow(t, k, answerBound); !ok {
			t.Fatalf("after %q: not reseeded: %s", code, why)
		}
	}
	s, _ := execute(t, k.ID(), "import time\nend = time.time() + 3\nn = 0\nwhile time.time() < end:\n    signal.signal(41, signal.SIG_DFL)\n    signal.signal(41, lambda s, f: None)\n    n += 1\nprint(n > 0)", 0, false)
	r := attach(t, s, 0)
	for i := range 10 {
		if ok, why := reseedNow(t, k, answerBound); !ok {
			t.Fatalf("reseed %d while user code switches the handler: %s", i, why)
		}
	}
	evs, end := r.all()
	wantStatus(t, end, StatusOK)
	if stdout(evs) != "True\n" {
		t.Fatalf("the switching cell printed %q", stdout(evs))
	}
	evs, end = run(t, k.ID(), "print(6*7)")
	wantStatus(t, end, StatusOK)
	if stdout(evs) != "42\n" {
		t.Fatalf("the kernel after the reseeds: %q", stdout(evs))
	}
}

// TestReseedLeavesLostAndUnhookedKernels: a kernel already lost, and one
// whose reseed handler was never installed, are reported not reseeded,
// with why, and are not signalled: their random state goes on from
// random.seed(7) as if no resume had happened.
func TestReseedLeavesLostAndUnhookedKernels(t *testing.T) {
	k := startKernel(t)
	_, end := run(t, k.ID(), "import random\nrandom.seed(7)")
	wantStatus(t, end, StatusOK)
	want := seeded(t, 2)
	next := func() string {
		t.Helper()
		s, end := run(t, k.ID(), "print(repr(random.random()))")
		wantStatus(t, end, StatusOK)
		return strings.TrimSpace(stdout(s))
	}

	k.mu.Lock()
	k.lost = true
	k.mu.Unlock()
	if ok, why := reseedNow(t, k, 5*time.Second); ok || !strings.Contains(why, "did not answer the survival check") {
		t.Errorf("a lost kernel: reseeded %v, %q", ok, why)
	}
	k.mu.Lock()
	k.lost = false
	inst := k.inst
	k.mu.Unlock()
	if got := next(); got != want[0] {
		t.Errorf("a lost kernel was signalled: random.random() is %s after seed(7), want %s", got, want[0])
	}

	nonce := inst.reseedNonce
	inst.reseedNonce, inst.reseedWhy = "", "its reseed handler was not installed (test)"
	if ok, why := reseedNow(t, k, 5*time.Second); ok || why != "its reseed handler was not installed (test)" {
		t.Errorf("a kernel without a handler: reseeded %v, %q", ok, why)
	}
	inst.reseedNonce = nonce
	if got := next(); got != want[1] {
		t.Errorf("a kernel without a handler was signalled: random.random() is %s, want %s", got, want[1])
	}
}
