// Package runaway runs, through the native protocol as an SDK would, the
// runaway user work a sandbox must survive (a memory hog, the shell's fork
// bomb and eight busy loops, all at once and at the default priority)
// while a host probes /health and a client runs `echo ok`, and reports
// how the agent answered. `rayito-agent runaway` and the VM test share it:
// one definition of the load a user can run to see the agent keep its
// footing, and the one the test asserts on.
package runaway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// The load, as a new user would write it: nothing niced.
var (
	// MemoryHog appends a 16 MiB bytearray every 10 ms.
	MemoryHog = []string{"python3", "-c", "import time\na = []\nwhile True:\n    a.append(bytearray(16 << 20))\n    time.sleep(0.01)"}
	// ForkBomb is the shell's fork bomb, killed by timeout after 60 s.
	ForkBomb = []string{"timeout", "-s", "KILL", "60", "sh", "-c", "b() { b | b & }; b; sleep 70"}
	// BusyLoops are eight busy loops in one command.
	BusyLoops = []string{"sh", "-c", "for i in 1 2 3 4 5 6 7 8; do (while :; do :; done) & done; wait"}
)

// Bounds of the probes, as a host's health check and a patient client
// set them.
const (
	HealthBound = 5 * time.Second
	ExecBound   = 10 * time.Second
	// AnswerBound is how soon after the load ends the agent must answer
	// /health again, and how fast.
	AnswerBound = time.Second
	// HogBound is how long after its start the memory hog must have met
	// the OOM killer.
	HogBound = 60 * time.Second
)

// Options shape a run; zero values take the defaults.
type Options struct {
	For         time.Duration // how long the probes run under the load (30 s)
	HealthEvery time.Duration // 500 ms
	ExecEvery   time.Duration // 1.5 s
	IdleProbes  int           // /health probes of the idle baseline (20; half as many execs)
	// Started, if set, is told when the load starts (the VM test starts
	// its sampler).
	Started func()
}

// Report is what a run saw.
type Report struct {
	IdleHealth, IdleExec []time.Duration
	Health, Exec         []time.Duration
	// HealthSpans are when each of Health ran.
	HealthSpans []Span
	// Excused are the /health probes that ran while the machine under
	// the guest stalled it (Excuse), and why: left out of the p99, still
	// bound by a second.
	Excused map[int]string
	// Failures are the probes that failed or ran past their bound; Slow
	// the ones that answered past the health limit (/health) or a
	// second (exec), and when.
	Failures, Slow []string
	// Hog is how the memory hog ended, and HogAfter when, after its start
	// (zero: it still ran HogBound after its start).
	Hog      client.ExitStatus
	HogAfter time.Duration
	// Back is how long after the load was killed /health answered within
	// AnswerBound (zero: it did not within a minute).
	Back time.Duration
}

// Run measures the idle baseline, starts the load, probes for o.For, waits
// for the hog's end (at most HogBound), kills the rest and measures how
// soon the agent answers again. c reaches the agent; url is its address
// for /health, probed without the token as a host's health check is.
func Run(ctx context.Context, c *client.Client, url string, o Options) (Report, error) {
	if o.For == 0 {
		o.For = 30 * time.Second
	}
	if o.HealthEvery == 0 {
		o.HealthEvery = 500 * time.Millisecond
	}
	if o.ExecEvery == 0 {
		o.ExecEvery = 1500 * time.Millisecond
	}
	if o.IdleProbes == 0 {
		o.IdleProbes = 20
	}
	var r Report
	for range o.IdleProbes {
		d, err := health(ctx, url, HealthBound)
		if err != nil {
			return r, fmt.Errorf("/health before the load: %w", err)
		}
		r.IdleHealth = append(r.IdleHealth, d)
	}
	for range max(o.IdleProbes/2, 1) {
		d, err := echo(ctx, c, ExecBound)
		if err != nil {
			return r, fmt.Errorf("exec echo ok before the load: %w", err)
		}
		r.IdleExec = append(r.IdleExec, d)
	}

	if o.Started != nil {
		o.Started()
	}
	started := time.Now()
	var load []*client.Process
	defer func() {
		// Whatever happened, nothing of the load runs on.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, p := range load {
			p.Signal(kctx, client.SIGKILL)
		}
	}()
	for _, argv := range [][]string{MemoryHog, ForkBomb, BusyLoops} {
		p, err := c.Exec(ctx, client.ExecOptions{Argv: argv})
		if err != nil {
			return r, fmt.Errorf("starting %q: %w", argv[0], err)
		}
		load = append(load, p)
	}
	hogEnded := make(chan struct{})
	go func() {
		defer close(hogEnded)
		hctx, cancel := context.WithTimeout(ctx, HogBound)
		defer cancel()
		if st, err := load[0].Wait(hctx); err == nil {
			r.Hog, r.HogAfter = st, time.Since(started)
		}
	}()

	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		r.Failures = append(r.Failures, fmt.Sprintf("%v: ", time.Since(started).Round(time.Millisecond))+fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var wg sync.WaitGroup
	probe := func(every, slow time.Duration, into *[]time.Duration, spans *[]Span, f func() (time.Duration, error), what string) {
		defer wg.Done()
		for time.Since(started) < o.For && ctx.Err() == nil {
			at := time.Since(started)
			from := time.Now()
			d, err := f()
			mu.Lock()
			*into = append(*into, d)
			if spans != nil {
				*spans = append(*spans, Span{from, from.Add(d)})
			}
			if d > slow {
				r.Slow = append(r.Slow, fmt.Sprintf("%s at %v took %v", what, at.Round(time.Millisecond), d.Round(time.Millisecond)))
			}
			mu.Unlock()
			if err != nil {
				fail("%s: %v", what, err)
			}
			time.Sleep(every)
		}
	}
	wg.Add(2)
	go probe(o.HealthEvery, r.HealthLimit(), &r.Health, &r.HealthSpans, func() (time.Duration, error) { return health(ctx, url, HealthBound) }, "/health")
	go probe(o.ExecEvery, time.Second, &r.Exec, nil, func() (time.Duration, error) { return echo(ctx, c, ExecBound) }, "exec echo ok")
	wg.Wait()
	<-hogEnded

	// The load ends as a user ends it: killed.
	kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	for _, p := range load {
		p.Signal(kctx, client.SIGKILL)
	}
	cancel()
	ended := time.Now()
	for time.Since(ended) < time.Minute && ctx.Err() == nil {
		if d, err := health(ctx, url, AnswerBound); err == nil && d < AnswerBound {
			r.Back = time.Since(ended)
			break
		}
	}
	return r, ctx.Err()
}

// health probes /health without the token, as a host's check does.
func health(ctx context.Context, url string, bound time.Duration) (time.Duration, error) {
	hctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	started := time.Now()
	_, err := client.GetHealth(hctx, url, nil)
	return time.Since(started), err
}

// echo runs `echo ok` and waits for its exit and output.
func echo(ctx context.Context, c *client.Client, bound time.Duration) (time.Duration, error) {
	ectx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	started := time.Now()
	var mu sync.Mutex
	var out []byte
	p, err := c.Exec(ectx, client.ExecOptions{Argv: []string{"echo", "ok"}, OnStdout: func(b []byte) {
		mu.Lock()
		out = append(out, b...)
		mu.Unlock()
	}})
	if err != nil {
		return time.Since(started), err
	}
	st, err := p.Wait(ectx)
	d := time.Since(started)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case err != nil:
		return d, err
	case st.ExitCode() != 0 || string(out) != "ok\n":
		return d, fmt.Errorf("ended %+v with %q", st, out)
	}
	return d, nil
}

// Quantile is the q-th percentile (0 to 100) of d, 0 for none.
func Quantile(d []time.Duration, q int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[max((len(s)*q+99)/100-1, 0)]
}

// HealthLimit is the p99 /health may have under the load: 5 times the idle
// p99, or 100 ms if more, and under a second.
func (r Report) HealthLimit() time.Duration {
	return min(max(5*Quantile(r.IdleHealth, 99), 100*time.Millisecond), time.Second-time.Millisecond)
}

// Span is when a probe ran.
type Span struct{ From, To time.Time }

// MaxExcused is the share of /health probes that may be excused: more,
// and the agent is slow, whatever the machine did.
const MaxExcused = 0.1

// Excuse asks stalled, for each /health probe under the load that took
// longer than the limit, whether the machine under the guest stalled the
// guest meanwhile (an emulator, say, while it throws away translated
// code), and keeps the answer: such a probe measured the machine, not
// the agent, and is left out of the p99, though still bound by a second,
// and no more than MaxExcused of the probes may be. "" means no.
func (r *Report) Excuse(stalled func(Span) string) {
	limit := r.HealthLimit()
	for i, sp := range r.HealthSpans {
		if r.Health[i] <= limit {
			continue
		}
		if why := stalled(sp); why != "" {
			if r.Excused == nil {
				r.Excused = map[int]string{}
			}
			r.Excused[i] = why
		}
	}
}

// counted is Health less the excused probes.
func (r Report) counted() []time.Duration {
	var d []time.Duration
	for i, h := range r.Health {
		if _, ok := r.Excused[i]; !ok {
			d = append(d, h)
		}
	}
	return d
}

// Problems lists what the run saw the agent fail at, none if it kept its
// footing.
func (r Report) Problems() []string {
	p := slices.Clone(r.Failures)
	if got, limit := Quantile(r.counted(), 99), r.HealthLimit(); got > limit {
		p = append(p, fmt.Sprintf("/health p99 under the load %v, over %v", got.Round(time.Millisecond), limit.Round(time.Millisecond)))
	}
	if n := len(r.Excused); float64(n) > MaxExcused*float64(len(r.Health)) {
		p = append(p, fmt.Sprintf("%d of %d /health probes over the limit while the machine stalled: more than %.0f%%", n, len(r.Health), MaxExcused*100))
	}
	for i := range r.Excused {
		if r.Health[i] >= AnswerBound {
			p = append(p, fmt.Sprintf("/health took %v, over %v, while %s", r.Health[i].Round(time.Millisecond), AnswerBound, r.Excused[i]))
		}
	}
	if !r.Hog.OOMKilled || r.HogAfter == 0 || r.HogAfter > HogBound {
		p = append(p, fmt.Sprintf("the memory hog did not end oom_killed within %v of its start (%+v after %v)", HogBound, r.Hog, r.HogAfter.Round(time.Millisecond)))
	}
	if r.Back == 0 || r.Back > AnswerBound {
		p = append(p, fmt.Sprintf("/health did not answer within %v of the load's end (%v)", AnswerBound, r.Back.Round(time.Millisecond)))
	}
	return p
}

// String is the report in a few lines.
func (r Report) String() string {
	var b strings.Builder
	q := func(d []time.Duration, n int) string { return Quantile(d, n).Round(100 * time.Microsecond).String() }
	fmt.Fprintf(&b, "/health p50/p99: idle %s/%s (%d), under the load %s/%s (%d; limit %s)\n",
		q(r.IdleHealth, 50), q(r.IdleHealth, 99), len(r.IdleHealth), q(r.counted(), 50), q(r.counted(), 99), len(r.counted()), r.HealthLimit().Round(time.Millisecond))
	for i := range r.HealthSpans {
		if why, ok := r.Excused[i]; ok {
			fmt.Fprintf(&b, "excused: /health at %s took %v while %s\n", r.HealthSpans[i].From.UTC().Format("15:04:05.000"), r.Health[i].Round(time.Millisecond), why)
		}
	}
	fmt.Fprintf(&b, "exec echo ok p50/p99: idle %s/%s (%d), under the load %s/%s (%d; bound %s each)\n",
		q(r.IdleExec, 50), q(r.IdleExec, 99), len(r.IdleExec), q(r.Exec, 50), q(r.Exec, 99), len(r.Exec), ExecBound)
	fmt.Fprintf(&b, "memory hog: oom_killed %v after %s; /health answered %s after the load ended\n",
		r.Hog.OOMKilled, r.HogAfter.Round(time.Millisecond), r.Back.Round(time.Millisecond))
	for _, s := range r.Slow {
		fmt.Fprintf(&b, "slow: %s\n", s)
	}
	for _, p := range r.Problems() {
		fmt.Fprintf(&b, "problem: %s\n", p)
	}
	return b.String()
}
