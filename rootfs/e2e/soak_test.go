package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// The soak (make soak) runs only when RAYITO_SOAK_CYCLES is set; it
// writes its report as markdown to RAYITO_SOAK_REPORT as well, if set.
const (
	soakCyclesEnv = "RAYITO_SOAK_CYCLES"
	soakReportEnv = "RAYITO_SOAK_REPORT"
)

const (
	// soakSampleEvery is how many cycles go between two readings of the
	// agent's footprint.
	soakSampleEvery = 10
	// soakSetup and soakPerCycle bound the soak's streams: the setup
	// starts two kernels, and a cycle takes seconds to a minute under
	// TCG on a busy machine.
	soakSetup    = 15 * time.Minute
	soakPerCycle = 5 * time.Minute
)

// soakPace is the resume test's, but the command's and the terminal's
// output is retained in 32 KiB, which they fill within minutes, so most
// restores happen with full buffers (the command's blocks its writer,
// the terminal's drops its oldest output). The watch's writer removes
// old files, so the tree (and the image's inodes) stay small however
// long the soak runs.
// Its VM's agent keeps soakKeepEnded ended streams (soakImage).
var soakPace = pace{tick: 0.01, pty: 0.05, write: 0.05, cell: 0.1, keepFiles: 100, buffer: 32 << 10, image: &soakImage}

// soakKeepEnded is the soak agent's --keep-ended. The soak's probes
// (three short commands a cycle) end and are kept for later attaches; with
// the default (1,000, for ten minutes of the guest's clock, which stops
// while the VM is saved) a 100-cycle soak never reaches the bound and the
// footprint grows with every cycle. With 30 (the last ten cycles'
// probes) it reaches the bound by the first reading, so a footprint
// that still grows is a leak.
const soakKeepEnded = 30

// soakImage is the built image provisioned for the soak.
var soakImage = tokenImage{env: []string{"RAYITO_KEEP_ENDED=" + strconv.Itoa(soakKeepEnded)}}

// Slack of the footprint's flatness, over the first reading after a
// cycle (cycle 10). Connections of the host's HTTP calls come and go (a
// keep-alive connection from before a restore lingers until the guest's
// TCP gives up on it; a 20-cycle run saw 3 descriptors and 3 goroutines
// come and go) and the Go runtime adds threads under load. Memory is
// judged on the live heap less what the streams retain for clients
// (rayito_stream_retained_bytes), since the watch's and the cell's event
// channels keep filling towards their 10,000 events for most of the
// soak: what is left must not grow beyond the slack, which also covers
// the event rings' slots (24 bytes an event). RSS may grow by its slack
// (the garbage collector's breathing) plus twice the retention's growth
// (the heap's goal is twice the live heap). A leak of one descriptor or
// goroutine every few cycles, or of 30 KiB per cycle, exceeds them in a
// 100-cycle soak.
const (
	fdSlack        = 6
	goroutineSlack = 12
	threadSlack    = 6
	liveSlack      = 3 << 20
	rssSlack       = 8 << 20
)

// TestSoak puts one VM through many snapshot/restore cycles
// (RAYITO_SOAK_CYCLES) with a command printing a counter, a terminal
// running a loop, a recursive watch receiving file events and a cell
// printing slowly all open, and the Go client reattaching after each
// restore through the host's stable address. It fails unless every
// line, byte and event arrived exactly once, the agent reported
// generations 1..N one per restore and the client reconnected at each,
// no restore lost kernel state, and the agent's footprint read in the
// guest (RSS, descriptors, threads, goroutines) stayed flat. It reports
// the restore-to-reattached times (p50, p99).
func TestSoak(t *testing.T) {
	n := os.Getenv(soakCyclesEnv)
	if n == "" {
		t.Skipf("the soak runs with %s set (make soak)", soakCyclesEnv)
	}
	cycles, err := strconv.ParseUint(n, 10, 32)
	if err != nil || cycles == 0 {
		t.Fatalf("%s=%q: want a positive number of cycles", soakCyclesEnv, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), soakSetup+time.Duration(cycles)*soakPerCycle)
	defer cancel()
	rep := soakReport{cycles: cycles, started: time.Now(), loadBefore: loadAverage()}
	r := startRig(t, ctx, "soak", soakPace)
	defer r.stop()
	rep.machine = fmt.Sprintf("QEMU %s, %d vCPU, %d MiB", r.cur.Accel(), cpusOf(r.tv.cfg), memOf(r.tv.cfg))

	rep.sample(t, ctx, r, 0)

	for i := uint64(1); i <= cycles; i++ {
		res, ok := r.cycle(t, ctx, i)
		if !ok {
			t.Errorf("cycle %d: the VM could not be restored; the soak ends here", i)
			break
		}
		rep.results = append(rep.results, res)
		t.Logf("soak: cycle %d of %d: restore to detected %s, to reattached %s, to new output %s", i, cycles,
			res.detected.Round(10*time.Millisecond), res.reattached.Round(10*time.Millisecond), res.output.Round(10*time.Millisecond))
		if i%soakSampleEvery == 0 || i == cycles {
			rep.sample(t, ctx, r, i)
		}
	}

	rep.streams = r.finish(t, ctx)
	for _, p := range r.producers {
		rep.tallies = append(rep.tallies, p.seq.counts())
	}
	h, err := r.c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rep.final = h
	rep.reconnects = r.gens.reconnects()
	rep.took = time.Since(rep.started)
	rep.loadAfter = loadAverage()

	for _, f := range rep.failures() {
		t.Error(f)
	}
	text := rep.markdown(t.Failed())
	t.Log("soak report:\n" + text)
	if path := os.Getenv(soakReportEnv); path != "" {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// footprint is the agent's, read in the guest after a cycle.
type footprint struct {
	cycle      uint64
	rss        int64 // bytes
	fds        int
	threads    int
	goroutines int
	live       int64 // the live heap (go_gc_heap_live_bytes)
	retained   int64 // what the streams hold for clients (rayito_stream_retained_bytes)
	lost       int64 // rayito_stream_lost_total
	// ended is how many streams the agent keeps after their end (the
	// soak's own short commands, kept ten minutes for later attaches).
	ended int
}

// net is the live heap apart from what the streams retain for clients.
func (f footprint) net() int64 { return f.live - f.retained }

// footprint reads the agent's RSS, threads and descriptors from /proc in
// the guest (through a command the agent runs: it is that command's
// parent), and the rest from its /metrics.
func (r *rig) footprint(ctx context.Context) (footprint, error) {
	var f footprint
	out, err := r.g.sh(ctx, `p=$PPID; grep -E '^(VmRSS|Threads):' /proc/$p/status; echo "fds: $(ls /proc/$p/fd | wc -l)"`)
	if err != nil {
		return f, err
	}
	got := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, ":")
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		if err != nil {
			return f, fmt.Errorf("agent footprint: %q", out)
		}
		got[k] = n
	}
	if len(got) != 3 {
		return f, fmt.Errorf("agent footprint: %q", out)
	}
	f.rss, f.threads, f.fds = int64(got["VmRSS"])<<10, got["Threads"], got["fds"]
	m, err := r.metrics(ctx)
	if err != nil {
		return f, err
	}
	for _, name := range []string{"go_goroutines", "go_gc_heap_live_bytes", "rayito_stream_retained_bytes", "rayito_stream_lost_total"} {
		if _, ok := m[name]; !ok {
			return f, fmt.Errorf("no %s in the agent's /metrics", name)
		}
	}
	f.goroutines, f.live = int(m["go_goroutines"]), int64(m["go_gc_heap_live_bytes"])
	f.retained, f.lost = int64(m["rayito_stream_retained_bytes"]), int64(m["rayito_stream_lost_total"])
	for name, v := range m {
		if strings.HasPrefix(name, "rayito_streams{") && strings.Contains(name, `state="ended"`) {
			f.ended += int(v)
		}
	}
	return f, nil
}

// metrics reads the agent's /metrics through the host's route.
func (r *rig) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, routeURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.tv.token)
	resp, err := r.route.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			m[name] = v
		}
	}
	return m, sc.Err()
}

// soakReport collects what the soak measured and judges it.
type soakReport struct {
	cycles                uint64
	machine               string
	started               time.Time
	took                  time.Duration
	loadBefore, loadAfter string
	results               []cycleResult
	samples               []footprint
	streams               []string // a line per producer (rig.finish)
	tallies               []tally
	reconnects            []uint64
	final                 client.Health
	sampleErrs            []string
}

func (rep *soakReport) sample(t *testing.T, ctx context.Context, r *rig, cycle uint64) {
	f, err := r.footprint(ctx)
	if err != nil && cycle == 0 {
		t.Fatalf("the soak cannot read the agent's footprint: %v", err)
	}
	if err != nil {
		rep.sampleErrs = append(rep.sampleErrs, fmt.Sprintf("after cycle %d: %v", cycle, err))
		return
	}
	f.cycle = cycle
	rep.samples = append(rep.samples, f)
	t.Logf("soak: agent after cycle %d: RSS %s, %d fds, %d threads, %d goroutines, live heap %s of which %s retained for clients; %d lost; %d ended streams kept",
		cycle, mib(f.rss), f.fds, f.threads, f.goroutines, mib(f.live), mib(f.retained), f.lost, f.ended)
}

// failures lists everything the soak must not see.
func (rep *soakReport) failures() []string {
	var fs []string
	if got := uint64(len(rep.results)); got != rep.cycles {
		fs = append(fs, fmt.Sprintf("%d of %d cycles completed", got, rep.cycles))
	}
	for i, tl := range rep.tallies {
		if tl.lost+tl.dup+tl.lostBytes+tl.dupBytes+tl.stray != 0 || tl.lostEvents+tl.dupEvents != 0 {
			fs = append(fs, "lost or duplicated: "+rep.streams[i])
		}
	}
	// Generations: one per restore, in order, seen by the client too.
	prev := uint64(0)
	for i, res := range rep.results {
		if res.before != prev || res.generation != res.before+1 {
			fs = append(fs, fmt.Sprintf("restore %d took the generation from %d to %d (the one before ended at %d)", i+1, res.before, res.generation, prev))
		}
		prev = res.generation
	}
	if got := rep.final.ResumeGeneration; got != uint64(len(rep.results)) {
		fs = append(fs, fmt.Sprintf("final resume generation %d after %d restores", got, len(rep.results)))
	}
	if gens := slices.Compact(slices.Clone(rep.reconnects)); !slices.Equal(gens, seq1(uint64(len(rep.results)))) {
		fs = append(fs, fmt.Sprintf("the client reconnected at generations %v, want 1..%d once each in order", gens, len(rep.results)))
	}
	lost := 0
	for _, res := range rep.results {
		if res.kernelStateLost {
			lost++
		}
	}
	if lost > 0 || rep.final.KernelStateLost {
		fs = append(fs, fmt.Sprintf("kernel_state_lost after %d restores (now: %t)", lost, rep.final.KernelStateLost))
	}
	fs = append(fs, rep.sampleErrs...)
	if n := len(rep.samples); n > 0 && rep.samples[n-1].lost > 0 {
		fs = append(fs, fmt.Sprintf("the agent discarded %d bytes or events no client had acknowledged (rayito_stream_lost_total)", rep.samples[n-1].lost))
	}
	fs = append(fs, rep.growth()...)
	return fs
}

// seq1 is 1..n.
func seq1(n uint64) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = uint64(i) + 1
	}
	return s
}

// growth checks the footprint is flat: every reading after the first
// one taken after a cycle stays within the slack of it.
func (rep *soakReport) growth() []string {
	i := slices.IndexFunc(rep.samples, func(f footprint) bool { return f.cycle > 0 })
	if i < 0 {
		return nil
	}
	base := rep.samples[i]
	var fs []string
	for _, f := range rep.samples {
		if f.ended > soakKeepEnded {
			fs = append(fs, fmt.Sprintf("the agent kept %d ended streams after cycle %d, over its --keep-ended %d", f.ended, f.cycle, soakKeepEnded))
		}
	}
	for _, f := range rep.samples[i+1:] {
		if f.fds > base.fds+fdSlack {
			fs = append(fs, fmt.Sprintf("agent descriptors %d after cycle %d, %d after cycle %d", f.fds, f.cycle, base.fds, base.cycle))
		}
		if f.goroutines > base.goroutines+goroutineSlack {
			fs = append(fs, fmt.Sprintf("agent goroutines %d after cycle %d, %d after cycle %d", f.goroutines, f.cycle, base.goroutines, base.cycle))
		}
		if f.net() > base.net()+liveSlack {
			fs = append(fs, fmt.Sprintf("agent live heap less retention %s after cycle %d, %s after cycle %d",
				mib(f.net()), f.cycle, mib(base.net()), base.cycle))
		}
		if f.rss > base.rss+rssSlack+2*max(f.retained-base.retained, 0) {
			fs = append(fs, fmt.Sprintf("agent RSS %s after cycle %d, %s after cycle %d (retention %s, %s)",
				mib(f.rss), f.cycle, mib(base.rss), base.cycle, mib(f.retained), mib(base.retained)))
		}
		if f.threads > base.threads+threadSlack {
			fs = append(fs, fmt.Sprintf("agent threads %d after cycle %d, %d after cycle %d", f.threads, f.cycle, base.threads, base.cycle))
		}
	}
	return fs
}

// percentiles returns the p50 and p99 (nearest rank), min and max of one
// of the cycles' durations.
func (rep *soakReport) percentiles(of func(cycleResult) time.Duration) (p50, p99, lo, hi time.Duration) {
	if len(rep.results) == 0 {
		return
	}
	ds := make([]time.Duration, len(rep.results))
	for i, res := range rep.results {
		ds[i] = of(res)
	}
	slices.Sort(ds)
	rank := func(p float64) time.Duration {
		k := int(p*float64(len(ds))+0.999999) - 1
		return ds[min(max(k, 0), len(ds)-1)]
	}
	return rank(0.50), rank(0.99), ds[0], ds[len(ds)-1]
}

// markdown writes the report.
func (rep *soakReport) markdown(failed bool) string {
	var b strings.Builder
	verdict := "passed"
	if failed {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "Soak %s: %d snapshot/restore cycles of one VM (%s), %s, started %s; host load average %s before, %s after.\n\n",
		verdict, rep.cycles, rep.machine, rep.took.Round(time.Second), rep.started.UTC().Format(time.RFC3339),
		rep.loadBefore, rep.loadAfter)

	b.WriteString("| stream | what arrived (items: its lines; for the watch, the files it saw created) |\n|---|---|\n")
	for _, s := range rep.streams {
		name, desc, _ := strings.Cut(s, ": ")
		fmt.Fprintf(&b, "| %s | %s |\n", name, desc)
	}
	lost := 0
	for _, res := range rep.results {
		if res.kernelStateLost {
			lost++
		}
	}
	gens := slices.Compact(slices.Clone(rep.reconnects))
	fmt.Fprintf(&b, "\nResume generations: the agent reported %d after %d restores (each cycle checked it reported exactly its own); "+
		"the client reconnected %d times, at generations %s. kernel_state_lost: %d of %d restores, %t at the end.\n\n",
		rep.final.ResumeGeneration, len(rep.results), len(rep.reconnects), spanOf(gens), lost, len(rep.results), rep.final.KernelStateLost)

	b.WriteString("| agent after cycle | RSS | descriptors | threads | goroutines | live heap | of it retained for clients | live heap less retention | ended streams kept |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range rep.samples {
		fmt.Fprintf(&b, "| %d | %s | %d | %d | %d | %s | %s | %s | %d |\n", f.cycle, mib(f.rss), f.fds, f.threads, f.goroutines,
			mib(f.live), mib(f.retained), mib(f.net()), f.ended)
	}

	b.WriteString("\n| from the start of a restore to | p50 | p99 | min | max |\n|---|---|---|---|---|\n")
	for _, row := range []struct {
		what string
		of   func(cycleResult) time.Duration
	}{
		{"the resume detected in the guest", func(r cycleResult) time.Duration { return r.detected }},
		{"every stream reattached by the client", func(r cycleResult) time.Duration { return r.reattached }},
		{"new output on every stream", func(r cycleResult) time.Duration { return r.output }},
	} {
		p50, p99, lo, hi := rep.percentiles(row.of)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", row.what, secs(p50), secs(p99), secs(lo), secs(hi))
	}
	if fs := rep.failures(); len(fs) > 0 {
		b.WriteString("\nFailures:\n")
		for _, f := range fs {
			fmt.Fprintf(&b, "- %s\n", f)
		}
	}
	return b.String()
}

// spanOf writes 1..n for a run of consecutive numbers from 1, else the
// list.
func spanOf(gens []uint64) string {
	if len(gens) > 0 && slices.Equal(gens, seq1(uint64(len(gens)))) {
		return fmt.Sprintf("1..%d", len(gens))
	}
	return fmt.Sprint(gens)
}

func secs(d time.Duration) string { return fmtFloat(d.Seconds()) + " s" }
