package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
	"github.com/rayito/rayito-agent/rootfs/vm"
)

const (
	// cycles is how many snapshot/restore rounds the streams go through.
	cycles = 3
	// stoppedFor is how long the VM stays stopped between its snapshot
	// and the restore: longer than the agent's 3 s clock-jump threshold,
	// so the guest notices the restore by itself even without a VMGenID
	// uevent.
	stoppedFor = 6 * time.Second
	// progress is how many new items each stream must deliver before a
	// snapshot and after a restore.
	progress = 5
	// streamsTimeout bounds the whole test's streams.
	streamsTimeout = 15 * time.Minute
)

// TestResumeWithOpenStreams keeps a command, a terminal, a recursive
// watch and a running cell open across three snapshot/restore cycles of
// one VM. The restored VM listens on another port; the client is only
// ever pointed at the host's stable address (hostRoute) and reconnects
// and reattaches on its own. Each cycle checks that the agent noticed the
// restore by itself (generation N), that the host's POST /v1/resume for
// the same restore changes nothing, that the kernel kept its state, and
// at the end that every line and event arrived exactly once from the
// same processes.
func TestResumeWithOpenStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), streamsTimeout)
	defer cancel()
	r := startRig(t, ctx, "cycles", resumePace)
	defer r.stop()
	for i := uint64(1); i <= cycles; i++ {
		res, ok := r.cycle(t, ctx, i)
		if !ok {
			t.FailNow()
		}
		if res.generation != i {
			t.Errorf("restore %d: generation %d", i, res.generation)
		}
		timings.add(t, "restore to resume detected in the guest", res.detected)
		timings.add(t, "restore to every stream reattached (client reconnected)", res.reattached)
		timings.add(t, "restore to new output on every stream", res.output)
	}
	for _, line := range r.finish(t, ctx) {
		t.Log(line)
	}
	h, err := r.c.Health(ctx)
	if err != nil || h.ResumeGeneration != cycles || h.KernelStateLost {
		t.Errorf("after %d cycles: health %+v, %v; want generation %d, no kernel state lost", cycles, h, err, cycles)
	}

	t.Run("idle", func(t *testing.T) { checkIdle(t, r.c) })
}

// rig is one VM with x = 42 in its default kernel and the four producers
// streaming (a command, a terminal, a recursive watch and a cell on a
// second kernel), and a client that reaches it only through the host's
// stable address. The resume test and the soak put it through
// snapshot/restore cycles.
type rig struct {
	tv        testVM
	cur       *vm.VM // the VM running now
	route     *hostRoute
	gens      *genWatch
	c         *client.Client
	g         guest
	def       *client.Kernel
	pids      map[string]int // kernel id to pid
	files     []guestFile
	producers []*producer
}

// startRig boots the VM and starts everything; ctx bounds the producers'
// calls. Defer stop.
func startRig(t *testing.T, ctx context.Context, tag string, pc pace) *rig {
	img := pc.image
	if img == nil {
		img = &image
	}
	r := &rig{tv: vmConfigOf(t, img), route: newHostRoute(), gens: newGenWatch()}
	r.cur = bootHealthy(t, r.tv.cfg)
	t.Cleanup(r.route.Close)
	r.route.Set(hostAddr(t, r.cur))
	r.c = dial(t, ctx, routeURL, r.tv.token, client.Options{
		HTTPClient:       r.route.HTTPClient(),
		ReconnectTimeout: restoreTimeout + stoppedFor + time.Minute,
		OnReconnect:      r.gens.reconnected,
	})
	r.g = guest{r.c}
	if _, err := r.g.run(ctx, "rm", "-f", stopFile); err != nil {
		t.Fatal(err)
	}
	r.files = filesBeforeSnapshot(tag)
	for _, f := range r.files {
		if err := r.g.WriteFile(ctx, f.path, f.data); err != nil {
			t.Fatal(err)
		}
	}

	// x = 42 in the default kernel; the slow cell runs on a second one so
	// that "x" is not queued behind it.
	r.def = r.c.DefaultKernel()
	started := time.Now()
	if ex, err := r.def.Execute(ctx, "x = 42", client.ExecuteOptions{}); err != nil || ex.Status != cellOK {
		t.Fatalf("x = 42: %+v, %v", ex, err)
	}
	timings.add(t, "first cell (starts the default kernel)", time.Since(started))
	started = time.Now()
	slow, err := r.c.StartKernel(ctx, client.KernelOptions{})
	if err != nil {
		t.Fatalf("start a second kernel: %v", err)
	}
	timings.add(t, "kernel_start of a second kernel", time.Since(started))
	r.pids = kernelPids(t, ctx, r.c)

	for _, start := range []func() (*producer, error){
		func() (*producer, error) { return startTicker(ctx, r.c, pc) },
		func() (*producer, error) { return startPTYTicker(ctx, r.c, pc) },
		func() (*producer, error) { return startWatch(ctx, r.c, r.g, "/home/user/watched", pc) },
		func() (*producer, error) { return startCell(ctx, slow, r.pids[slow.ID()], pc) },
		func() (*producer, error) { return startInputEcho(ctx, r.c, pc, false) },
		func() (*producer, error) { return startInputEcho(ctx, r.c, pc, true) },
	} {
		p, err := start()
		if err != nil {
			t.Fatal(err)
		}
		r.producers = append(r.producers, p)
	}
	return r
}

// cycleResult is what one snapshot/restore cycle saw and measured (the
// durations from the start of the restore).
type cycleResult struct {
	// before is the agent's generation before the snapshot, generation
	// the one it reported after the restore and the host's call for it.
	before, generation uint64
	detected           time.Duration // the agent reported a new generation
	reattached         time.Duration // the client had every handle reattached
	output             time.Duration // every stream delivered new items
	// kernelStateLost is what /health said once the resume was detected.
	kernelStateLost bool
}

// cycle runs snapshot/restore cycle n in a subtest (see resumeCycle),
// then checks the files and the kernel's x. ok is false if the VM could
// not be restored, after which the rig is unusable.
func (r *rig) cycle(t *testing.T, ctx context.Context, n uint64) (res cycleResult, ok bool) {
	t.Run(fmt.Sprintf("cycle%d", n), func(st *testing.T) {
		res = r.resumeCycle(st, t)
		ok = true
	})
	if !ok {
		return res, false
	}
	r.g.checkFiles(t, ctx, r.files)
	ex, err := r.def.Execute(ctx, "x", client.ExecuteOptions{})
	if err != nil || ex.Text() != "42" {
		t.Errorf("x after restore %d: %+v, %v; want 42", n, ex, err)
	}
	return res, true
}

// stop stops the producers even if the test failed half-way (while the
// VM still runs).
func (r *rig) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, _ = r.g.run(ctx, "touch", stopFile)
}

// finish stops the producers and checks that every line and event
// arrived exactly once, from the processes that started before the first
// snapshot. It returns a line per producer saying what it counted.
func (r *rig) finish(t *testing.T, ctx context.Context) []string {
	if _, err := r.g.run(ctx, "touch", stopFile); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range r.producers {
		if err := p.finish(ctx); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		if err := p.seq.waitComplete(ctx); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		desc, problems := p.seq.result()
		lines = append(lines, p.name+": "+desc)
		for _, pr := range problems {
			t.Errorf("%s: %s", p.name, pr)
		}
	}
	return lines
}

// resumeCycle snapshots the VM with the streams flowing, keeps it
// stopped, restores it on another port and checks that everything picked
// up: the restore must bump the generation by exactly one. The restored
// VM becomes r.cur; owner's end closes it.
func (r *rig) resumeCycle(t, owner *testing.T) cycleResult {
	ctx := opContext(t)
	var res cycleResult
	h0, err := r.c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res.before = h0.ResumeGeneration
	gen := res.before + 1
	before := map[string]int{}
	for _, p := range r.producers {
		n := p.seq.count()
		if err := p.seq.waitFor(ctx, n+progress); err != nil {
			t.Fatalf("before the snapshot: %v", err)
		}
		before[p.name] = p.seq.count()
	}

	// The host quiesces the sandbox first, as before every snapshot.
	quiesce(t, ctx, r.cur, r.tv.token, client.PauseOptions{})
	snapDir := t.TempDir()
	stopped := snapshot(t, r.cur, snapDir)
	r.route.Down()
	if err := r.cur.Close(); err != nil {
		t.Fatal(err)
	}
	if wait := time.Until(stopped.Add(stoppedFor)); wait > 0 {
		time.Sleep(wait)
	}
	next, restored := restoreHealthy(t, owner, r.tv.cfg, snapDir)
	r.cur = next

	// The agent notices the restore by itself: generation gen before any
	// host call or client connection reaches the VM (the route opens only
	// then, so the client reconnects once, after the resume was
	// published). Then the host's call for the same restore, and a retry
	// of it, are folded into it.
	h, err := awaitGeneration(ctx, next.AgentURL(), r.tv.token, nil, gen)
	if err != nil {
		t.Fatal(err)
	}
	if h.ResumeGeneration != gen {
		t.Errorf("the restore took the generation from %d to %d: %+v", res.before, h.ResumeGeneration, h)
	}
	res.detected = time.Since(restored)
	res.kernelStateLost = h.KernelStateLost
	r.route.Set(hostAddr(t, next))
	if h.KernelStateLost {
		t.Errorf("kernel_state_lost after restore %d: %+v", gen, h)
	}
	id := fmt.Sprintf("e2e-restore-%d", gen)
	for attempt := 1; attempt <= 2; attempt++ {
		hh, err := r.c.Resume(ctx, client.ResumeOptions{ResumeID: id, TimeUnixNs: time.Now().UnixNano()})
		if err != nil || hh.ResumeGeneration != gen {
			t.Errorf("POST /v1/resume %s (attempt %d) for the restore the guest detected: generation %d, %v; want %d",
				id, attempt, hh.ResumeGeneration, err, gen)
		}
	}
	// The host's call waited for the detected resume to finish, so
	// last_resume is complete now.
	h, err = r.c.Health(ctx)
	if err == nil {
		res.generation = h.ResumeGeneration
	}
	switch {
	case err != nil:
		t.Fatal(err)
	case h.ResumeGeneration != gen:
		t.Errorf("generation %d after the host's call, want %d", h.ResumeGeneration, gen)
	case h.LastResume == nil || h.LastResume.Source == "host" || h.LastResume.Source == "boot":
		t.Errorf("last resume %+v: want one the guest detected (vmgenid or clock)", h.LastResume)
	default:
		t.Logf("restore %d detected in the guest by %s; the resume sequence took %d ms", gen, h.LastResume.Source, h.LastResume.DurationMs)
	}

	at, err := r.gens.wait(ctx, res.generation)
	if err != nil {
		t.Fatalf("the client did not reconnect at generation %d: %v", res.generation, err)
	}
	res.reattached = at.Sub(restored)
	for _, p := range r.producers {
		if err := p.seq.waitFor(ctx, before[p.name]+progress); err != nil {
			t.Errorf("after restore %d: %v", gen, err)
		}
	}
	res.output = time.Since(restored)

	// The same processes go on.
	for _, p := range r.producers {
		list, err := r.c.List(ctx, p.kind)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range list {
			if s.Stream == p.stream {
				found = true
				if s.State != "running" || (p.kind != client.KindWatch && p.kind != client.KindCell && s.Pid != p.pid) {
					t.Errorf("%s stream %d after restore %d: %+v, want running with pid %d", p.name, p.stream, gen, s, p.pid)
				}
			}
		}
		if !found {
			t.Errorf("%s stream %d missing after restore %d", p.name, p.stream, gen)
		}
	}
	for id, pid := range kernelPids(t, ctx, r.c) {
		if want, ok := r.pids[id]; ok && want != pid {
			t.Errorf("kernel %s pid %d after restore %d, want %d", id, pid, gen, want)
		}
	}
	return res
}

// hostAddr is the host:port of v's forwarded agent port.
func hostAddr(t *testing.T, v *vm.VM) string {
	u, err := url.Parse(v.AgentURL())
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// kernelPids maps each kernel id to its process id.
func kernelPids(t *testing.T, ctx context.Context, c *client.Client) map[string]int {
	t.Helper()
	ks, err := c.Kernels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, k := range ks {
		if k.State == "dead" || k.State == "lost" {
			t.Errorf("kernel %+v", k)
		}
		m[k.Kernel] = k.Pid
	}
	return m
}

// genWatch records when the client got back a connection at each resume
// generation (client.Options.OnReconnect).
type genWatch struct {
	mu      sync.Mutex
	at      map[uint64]time.Time
	all     []uint64 // the generation of every reconnect, in order
	changed chan struct{}
}

func newGenWatch() *genWatch {
	return &genWatch{at: map[uint64]time.Time{}, changed: make(chan struct{})}
}

func (w *genWatch) reconnected(gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.at[gen]; !ok {
		w.at[gen] = time.Now()
	}
	w.all = append(w.all, gen)
	close(w.changed)
	w.changed = make(chan struct{})
}

// wait returns when the client first had every handle reattached on a
// connection of generation gen.
func (w *genWatch) wait(ctx context.Context, gen uint64) (time.Time, error) {
	for {
		w.mu.Lock()
		at, ok := w.at[gen]
		ch := w.changed
		var seen []string
		for g := range w.at {
			seen = append(seen, fmt.Sprint(g))
		}
		w.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("reconnects seen at generations [%s]: %w", strings.Join(seen, " "), ctx.Err())
		}
	}
}

// reconnects returns the generation of every reconnect so far, in order.
func (w *genWatch) reconnects() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]uint64(nil), w.all...)
}
