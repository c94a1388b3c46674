package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
)

// noReseedImage runs the agent with --reseed-on-resume=false: the case
// that shows the hazard the reseed removes.
var noReseedImage = tokenImage{env: []string{"RAYITO_RESEED_ON_RESUME=false"}}

// cloneSetup bounds booting, starting two kernels and importing numpy
// under TCG.
const cloneSetup = 4 * time.Minute

// clone is what one sandbox made from the snapshot saw.
type clone struct {
	v          *vm.VM
	c          *client.Client
	health     client.Health
	urandom    string // 32 bytes of /dev/urandom in a new process
	uuidKernel string // /proc/sys/kernel/random/uuid
	uuidPython string // uuid.uuid4() in a new Python process
	firstLive  int    // the first line the running cell printed after the resume's answer
	line       string // the running cell's line at the index compared across clones
	kernel     string // random.random(), numpy.random.rand(), tempfile.mktemp() in the idle kernel
}

// TestClonesDiverge: one VM with two kernels that imported random and
// numpy, one of them running a cell that prints random.random() every
// 100 ms, is snapshotted once and the snapshot restored three times. In
// each clone every value that should be random differs from the other
// clones': the kernel CRNG (/dev/urandom, the kernel's uuid, uuid4() in a
// new process), and in the kernels that existed before the snapshot
// random, numpy and tempfile, and the running cell's numbers. With the
// host's call (entropy and a sandbox id) and without any host call (the
// guest notices the restore by itself). With --reseed-on-resume=false
// the kernels' values are the same in every clone: the hazard is real and
// the test can see it.
func TestClonesDiverge(t *testing.T) {
	// Without a VMGenID device (Cloud Hypervisor has none) Linux does not
	// reseed its CRNG on a restore by itself: only the agent's re-key
	// makes the clones' CRNGs differ then.
	cases := []struct {
		name      string
		image     *tokenImage
		host      bool
		reseed    bool
		noVMGenID bool
	}{
		{"host call", &image, true, true, false},
		{"in-guest detection only, no VMGenID", &image, false, true, true},
		{"reseed off, no VMGenID", &noReseedImage, true, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clones := makeClones(t, tc.image, tc.host, tc.noVMGenID)
			kernelValues := func(c clone) []string { return []string{c.kernel, c.line} }
			crngValues := func(c clone) []string { return []string{c.urandom, c.uuidKernel, c.uuidPython} }
			for i, c := range clones {
				t.Logf("clone %d: last_resume %+v; urandom %s, uuid %s, uuid4 %s; kernel %q; cell %q",
					i, c.health.LastResume, c.urandom, c.uuidKernel, c.uuidPython, c.kernel, c.line)
			}
			if tc.reseed {
				for i, c := range clones {
					lr := c.health.LastResume
					if lr == nil || !lr.Reseeded || len(lr.KernelsReseeded) != 2 || len(lr.KernelsNotReseeded) != 0 {
						t.Errorf("clone %d: last_resume %+v, want the CRNG and both kernels reseeded", i, lr)
					}
					if tc.host && (!lr.NewSandbox || !contains(lr.EntropySources, "host")) {
						t.Errorf("clone %d: last_resume %+v, want a new sandbox and the host's entropy", i, lr)
					}
				}
				allDiffer(t, clones, "kernel CRNG", crngValues)
				allDiffer(t, clones, "kernel PRNGs", kernelValues)
				return
			}
			allEqual(t, clones, "kernel PRNGs without reseeding", kernelValues)
			// The kernel CRNG without the agent's re-key and without a
			// VMGenID device: what Linux 6.1 does by itself.
			for k, name := range []string{"/dev/urandom", "the kernel's uuid", "uuid4() in a new process"} {
				same := crngValues(clones[0])[k] == crngValues(clones[1])[k]
				t.Logf("observed: without the agent's re-key and without VMGenID, %s was %s in clones 0 and 1", name, map[bool]string{true: "the same", false: "different"}[same])
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func allDiffer(t *testing.T, clones []clone, what string, values func(clone) []string) {
	t.Helper()
	for i := range clones {
		for j := i + 1; j < len(clones); j++ {
			a, b := values(clones[i]), values(clones[j])
			for k := range a {
				if a[k] == "" || a[k] == b[k] {
					t.Errorf("%s: clones %d and %d have the same value %q", what, i, j, a[k])
				}
			}
		}
	}
}

func allEqual(t *testing.T, clones []clone, what string, values func(clone) []string) {
	t.Helper()
	for i := 1; i < len(clones); i++ {
		a, b := values(clones[0]), values(clones[i])
		for k := range a {
			if a[k] == "" || a[k] != b[k] {
				t.Errorf("%s: clone 0 has %q, clone %d %q; want them equal", what, a[k], i, b[k])
			}
		}
	}
}

const (
	idleKernelSetup = "import random, tempfile, numpy\nrandom.random(); numpy.random.rand(); tempfile.mktemp()"
	idleKernelRead  = "print(repr(random.random()), repr(numpy.random.rand()), tempfile.mktemp())"
	loopCell        = "import random, time\nfor i in range(1000000):\n    print(i, repr(random.random()), flush=True)\n    time.sleep(0.1)"
)

// makeClones boots the template, snapshots it, and restores the snapshot
// three times; the clones run side by side until the test ends, so that
// the running cell's line at one index can be read in all of them.
func makeClones(t *testing.T, ti *tokenImage, host, noVMGenID bool) []clone {
	tv := vmConfigOf(t, ti)
	tv.cfg.NoVMGenID = noVMGenID
	orig := bootHealthy(t, tv.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), cloneSetup)
	defer cancel()
	c := dial(t, ctx, orig.AgentURL(), tv.token, client.Options{})
	idle, err := c.StartKernel(ctx, client.KernelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := idle.Execute(ctx, idleKernelSetup, client.ExecuteOptions{}); err != nil || ex.Status != "ok" {
		t.Fatalf("idle kernel setup: %+v %v", ex, err)
	}
	busy, err := c.StartKernel(ctx, client.KernelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cell, err := busy.Run(ctx, loopCell, client.ExecuteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cell.Next(ctx); err != nil { // running
		t.Fatal(err)
	}
	snap := t.TempDir()
	stopped := snapshot(t, orig, snap)
	c.Close()
	orig.Close()
	if !host {
		// The guest notices by itself: past its clock-jump threshold.
		time.Sleep(time.Until(stopped.Add(stoppedFor)))
	}
	clones := make([]clone, 3)
	for i := range clones {
		clones[i] = restoreClone(t, tv, snap, host, i, cell.Stream())
	}
	// The index compared: printed after every clone's resume answered.
	at := 0
	for _, cl := range clones {
		at = max(at, cl.firstLive+3)
	}
	for i := range clones {
		cl := &clones[i]
		rctx := opContext(t)
		cl.line, err = cellLine(rctx, cl.c, cell.Stream(), nil, at)
		if err != nil {
			t.Fatalf("clone %d: the running cell's line %d: %v", i, at, err)
		}
		if err := cl.c.Kernel(busy.ID()).Interrupt(rctx); err != nil {
			t.Fatalf("clone %d: interrupt: %v", i, err)
		}
		ex, err := cl.c.Kernel(idle.ID()).Execute(rctx, idleKernelRead, client.ExecuteOptions{})
		if err != nil || ex.Status != "ok" {
			t.Fatalf("clone %d: the idle kernel: %+v %v", i, ex, err)
		}
		cl.kernel = strings.TrimSpace(ex.Stdout)
	}
	return clones
}

// restoreClone restores snap as sandbox i, tells the agent (host) or waits
// for it to notice, and reads the CRNG values and where the running cell
// is.
func restoreClone(t *testing.T, tv testVM, snap string, host bool, i int, cellStream uint64) clone {
	t.Helper()
	v, _ := restoreHealthy(t, t, tv.cfg, snap)
	ctx := opContext(t)
	var h client.Health
	if host {
		entropy := make([]byte, 32)
		rand.Read(entropy)
		var err error
		h, err = client.Host{URL: v.AgentURL(), Token: tv.token}.Resume(ctx, client.ResumeOptions{
			ResumeID: fmt.Sprintf("clone-%d", i), TimeUnixNs: time.Now().UnixNano(),
			Entropy: entropy, SandboxID: fmt.Sprintf("sandbox-%d", i),
		})
		if err != nil {
			t.Fatalf("clone %d: resume: %v", i, err)
		}
	} else {
		h = waitGeneration(t, ctx, v.AgentURL(), tv.token, nil, 1)
	}
	c := dial(t, ctx, v.AgentURL(), tv.token, client.Options{})
	t.Cleanup(func() { c.Close() })
	g := guest{c}
	cl := clone{v: v, c: c, health: h}
	var err error
	if cl.urandom, err = g.sh(ctx, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'"); err != nil {
		t.Fatal(err)
	}
	if cl.uuidKernel, err = g.run(ctx, "cat", "/proc/sys/kernel/random/uuid"); err != nil {
		t.Fatal(err)
	}
	if cl.uuidPython, err = g.run(ctx, "/usr/bin/python3", "-c", "import uuid; print(uuid.uuid4())"); err != nil {
		t.Fatal(err)
	}
	// Where the cell is now: its next line was printed after the answer.
	streams, err := c.List(ctx, client.KindCell)
	if err != nil {
		t.Fatal(err)
	}
	var from map[string]uint64
	for _, s := range streams {
		if s.Stream == cellStream {
			from = s.Cursors
		}
	}
	if from == nil {
		t.Fatalf("clone %d: the running cell %d is not listed: %+v", i, cellStream, streams)
	}
	if cl.firstLive, err = firstCellLine(ctx, c, cellStream, from); err != nil {
		t.Fatalf("clone %d: %v", i, err)
	}
	return cl
}

// cellLines reads the loop cell's "i value" lines from cursor from until
// stop says so.
func cellLines(ctx context.Context, c *client.Client, id uint64, from map[string]uint64, stop func(i int, line string) bool) error {
	cell, err := c.AttachCell(ctx, client.AttachOptions{Stream: id, From: from})
	if err != nil {
		return err
	}
	defer cell.Detach(ctx)
	var partial string
	for {
		ev, err := cell.Next(ctx)
		var gap *client.GapError
		switch {
		case errors.As(err, &gap):
			partial = ""
			continue
		case err != nil:
			return err
		}
		if ev.Type != "stdout" {
			continue
		}
		lines := strings.Split(partial+ev.Text, "\n")
		partial = lines[len(lines)-1]
		for _, l := range lines[:len(lines)-1] {
			idx, _, ok := strings.Cut(l, " ")
			n, err := strconv.Atoi(idx)
			if !ok || err != nil {
				continue // the first line after a gap may be cut
			}
			if stop(n, l) {
				return nil
			}
		}
	}
}

func firstCellLine(ctx context.Context, c *client.Client, id uint64, from map[string]uint64) (int, error) {
	first := -1
	err := cellLines(ctx, c, id, from, func(i int, _ string) bool { first = i; return true })
	return first, err
}

// cellLine returns the cell's line with index at, reading from cursor 0
// (what the clone retained) on.
func cellLine(ctx context.Context, c *client.Client, id uint64, from map[string]uint64, at int) (string, error) {
	var got string
	err := cellLines(ctx, c, id, from, func(i int, l string) bool {
		if i == at {
			got = l
		}
		return i >= at
	})
	if err == nil && got == "" {
		err = fmt.Errorf("line %d was not retained", at)
	}
	return got, err
}
