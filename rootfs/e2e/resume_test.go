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
	tv := vmConfig(t)
	cur := bootHealthy(t, tv.cfg)
	route := newHostRoute()
	t.Cleanup(route.Close)
	route.Set(hostAddr(t, cur))
	gens := newGenWatch()
	ctx, cancel := context.WithTimeout(context.Background(), streamsTimeout)
	defer cancel()
	c := dial(t, ctx, routeURL, tv.token, client.Options{
		HTTPClient:       route.HTTPClient(),
		ReconnectTimeout: restoreTimeout + stoppedFor + time.Minute,
		OnReconnect:      gens.reconnected,
	})
	g := guest{c}
	if _, err := g.run(ctx, "rm", "-f", stopFile); err != nil {
		t.Fatal(err)
	}
	files := filesBeforeSnapshot("cycles")
	for _, f := range files {
		if err := g.WriteFile(ctx, f.path, f.data); err != nil {
			t.Fatal(err)
		}
	}

	// x = 42 in the default kernel; the slow cell runs on a second one so
	// that "x" is not queued behind it.
	def := c.DefaultKernel()
	started := time.Now()
	if ex, err := def.Execute(ctx, "x = 42", client.ExecuteOptions{}); err != nil || ex.Status != cellOK {
		t.Fatalf("x = 42: %+v, %v", ex, err)
	}
	timings.add(t, "first cell (starts the default kernel)", time.Since(started))
	started = time.Now()
	slow, err := c.StartKernel(ctx, client.KernelOptions{})
	if err != nil {
		t.Fatalf("start a second kernel: %v", err)
	}
	timings.add(t, "kernel_start of a second kernel", time.Since(started))
	pids := kernelPids(t, ctx, c)

	var producers []*producer
	for _, start := range []func() (*producer, error){
		func() (*producer, error) { return startTicker(ctx, c) },
		func() (*producer, error) { return startPTYTicker(ctx, c) },
		func() (*producer, error) { return startWatch(ctx, c, g, "/home/user/watched") },
		func() (*producer, error) { return startCell(ctx, slow, pids[slow.ID()]) },
	} {
		p, err := start()
		if err != nil {
			t.Fatal(err)
		}
		producers = append(producers, p)
	}
	defer func() {
		// Stop the producers even if the test failed half-way.
		sctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_, _ = g.run(sctx, "touch", stopFile)
	}()

	for i := uint64(1); i <= cycles; i++ {
		owner, restored := t, false
		t.Run(fmt.Sprintf("cycle%d", i), func(t *testing.T) {
			cur = resumeCycle(t, owner, tv, cur, route, gens, c, producers, pids, i)
			restored = true
		})
		if !restored {
			t.FailNow()
		}
		g.checkFiles(t, ctx, files)
		ex, err := def.Execute(ctx, "x", client.ExecuteOptions{})
		if err != nil || ex.Text() != "42" {
			t.Errorf("x after restore %d: %+v, %v; want 42", i, ex, err)
		}
	}

	// Every line and event exactly once, from the processes that started
	// before the first snapshot.
	if _, err := g.run(ctx, "touch", stopFile); err != nil {
		t.Fatal(err)
	}
	for _, p := range producers {
		if err := p.finish(ctx); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		if err := p.seq.waitComplete(ctx); err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		desc, problems := p.seq.result()
		t.Logf("%s: %s", p.name, desc)
		for _, pr := range problems {
			t.Errorf("%s: %s", p.name, pr)
		}
	}
	h, err := c.Health(ctx)
	if err != nil || h.ResumeGeneration != cycles || h.KernelStateLost {
		t.Errorf("after %d cycles: health %+v, %v; want generation %d, no kernel state lost", cycles, h, err, cycles)
	}

	t.Run("idle", func(t *testing.T) { checkIdle(t, c) })
}

// resumeCycle snapshots cur with the streams flowing, keeps it stopped,
// restores it on another port and checks that everything picked up. It
// returns the restored VM, which owner's end closes.
func resumeCycle(t, owner *testing.T, tv testVM, cur *vm.VM, route *hostRoute, gens *genWatch, c *client.Client,
	producers []*producer, pids map[string]int, gen uint64) *vm.VM {
	ctx := opContext(t)
	before := map[string]int{}
	for _, p := range producers {
		n := p.seq.count()
		if err := p.seq.waitFor(ctx, n+progress); err != nil {
			t.Fatalf("before the snapshot: %v", err)
		}
		before[p.name] = p.seq.count()
	}

	snapDir := t.TempDir()
	stopped := snapshot(t, cur, snapDir)
	route.Down()
	if err := cur.Close(); err != nil {
		t.Fatal(err)
	}
	if wait := time.Until(stopped.Add(stoppedFor)); wait > 0 {
		time.Sleep(wait)
	}
	next, restored := restoreHealthy(t, owner, tv.cfg, snapDir)

	// The agent notices the restore by itself: generation gen before any
	// host call or client connection reaches the VM (the route opens only
	// then, so the client reconnects once, after the resume was
	// published). Then the host's call for the same restore, and a retry
	// of it, are folded into it.
	h := waitGeneration(t, ctx, next.AgentURL(), nil, gen)
	timings.add(t, "restore to resume detected in the guest", time.Since(restored))
	route.Set(hostAddr(t, next))
	if h.KernelStateLost {
		t.Errorf("kernel_state_lost after restore %d: %+v", gen, h)
	}
	id := fmt.Sprintf("e2e-restore-%d", gen)
	for attempt := 1; attempt <= 2; attempt++ {
		hh, err := c.Resume(ctx, client.ResumeOptions{ResumeID: id, TimeUnixNs: time.Now().UnixNano()})
		if err != nil || hh.ResumeGeneration != gen {
			t.Errorf("POST /v1/resume %s (attempt %d) for the restore the guest detected: generation %d, %v; want %d",
				id, attempt, hh.ResumeGeneration, err, gen)
		}
	}
	// The host's call waited for the detected resume to finish, so
	// last_resume is complete now.
	h, err := c.Health(ctx)
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

	at, err := gens.wait(ctx, gen)
	if err != nil {
		t.Fatalf("the client did not reconnect at generation %d: %v", gen, err)
	}
	timings.add(t, "restore to every stream reattached (client reconnected)", at.Sub(restored))
	for _, p := range producers {
		if err := p.seq.waitFor(ctx, before[p.name]+progress); err != nil {
			t.Errorf("after restore %d: %v", gen, err)
		}
	}
	timings.add(t, "restore to new output on every stream", time.Since(restored))

	// The same processes go on.
	for _, p := range producers {
		list, err := c.List(ctx, p.kind)
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
	for id, pid := range kernelPids(t, ctx, c) {
		if want, ok := pids[id]; ok && want != pid {
			t.Errorf("kernel %s pid %d after restore %d, want %d", id, pid, gen, want)
		}
	}
	return next
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
