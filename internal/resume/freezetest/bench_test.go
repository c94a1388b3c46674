package freezetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// resumeLoad is what is open on the agent while it resumes.
type resumeLoad struct {
	kernels, conns, perConn int
}

// BenchmarkResume times POST /v1/resume, from the request to its answer,
// with every kernel alive: the kernel check, the generation's publication
// and the cut of every connection (end events for every attachment, then
// the 4000 close). Between resumes, off the clock, every client
// reconnects and reattaches its streams. It reports p50, p99 and max per
// resume, and the agent's own measure of the sequence (last_resume).
//
//	go test -run '^$' -bench Resume -benchtime 200x ./internal/resume/freezetest/
func BenchmarkResume(b *testing.B) {
	for _, l := range []resumeLoad{
		{kernels: 4, conns: 10, perConn: 10},
		{kernels: 4}, // the baseline: no streams
		// What the parts cost: the cut alone, the close handshakes alone,
		// the fixed cost.
		{conns: 10, perConn: 10},
		{conns: 10},
		{},
	} {
		name := fmt.Sprintf("kernels=%d/conns=%d/streams=%d", l.kernels, l.conns, l.conns*l.perConn)
		var env *resumeBench
		b.Run(name, func(sub *testing.B) {
			// Set up on the first run only, and only if not filtered out.
			if env == nil {
				env = newResumeBench(lasting{sub, b}, l)
			}
			env.run(sub)
		})
		if env != nil {
			env.close()
		}
	}
}

// lasting is a sub-benchmark whose cleanups and temporary directories
// belong to its parent: what it sets up outlives one run with some b.N.
type lasting struct {
	*testing.B
	parent *testing.B
}

func (l lasting) Cleanup(f func()) { l.parent.Cleanup(f) }
func (l lasting) TempDir() string  { return l.parent.TempDir() }

// resumeBench is an agent with its load, kept across the benchmark's
// runs with growing b.N.
type resumeBench struct {
	a       *agent
	host    client.Host
	kernels int
	clients []*client.Client
	rcs     []reconnects
}

func newResumeBench(b testing.TB, l resumeLoad) *resumeBench {
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitLong)
	defer cancel()
	a := startAgent(b, agentConfig{Args: []string{"--log-level", "warn"}})
	rb := &resumeBench{a: a, host: client.Host{URL: a.url, Token: testToken}, kernels: l.kernels}
	if l.kernels > 0 {
		c := a.dial(b, client.Options{})
		for range l.kernels {
			if _, err := c.StartKernel(ctx, client.KernelOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		c.Close()
	}
	for range l.conns {
		rc := make(reconnects, 1024)
		c := a.dial(b, client.Options{OnReconnect: func(gen uint64) { rc <- gen }})
		for j := range l.perConn {
			// Half sleep, half print now and then, so some cuts find
			// output queued.
			argv := []string{"sleep", "3600"}
			if j%2 == 1 {
				argv = []string{"sh", "-c", "while :; do echo tick; sleep 1; done"}
			}
			if _, err := c.Exec(ctx, client.ExecOptions{Argv: argv, OnStdout: func([]byte) {}}); err != nil {
				b.Fatal(err)
			}
		}
		rb.clients = append(rb.clients, c)
		rb.rcs = append(rb.rcs, rc)
	}
	return rb
}

func (rb *resumeBench) close() {
	for _, c := range rb.clients {
		c.Close()
	}
	rb.a.stop()
}

func (rb *resumeBench) run(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*waitLong)
	defer cancel()
	took := make([]time.Duration, 0, b.N)
	var server []float64
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		h, err := rb.host.Resume(ctx, client.ResumeOptions{})
		d := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if h.KernelStateLost || len(h.Kernels) != rb.kernels || slices.ContainsFunc(h.Kernels, func(k client.KernelHealth) bool { return k.State != "alive" }) {
			b.Fatalf("a kernel was not alive: %+v", h)
		}
		took = append(took, d)
		server = append(server, float64(h.LastResume.DurationMs))
		for _, rc := range rb.rcs {
			rc.wait(b, h.ResumeGeneration)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	slices.Sort(server)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(took[len(took)/2]), "p50_ms")
	b.ReportMetric(ms(took[(len(took)*99)/100]), "p99_ms")
	b.ReportMetric(ms(took[len(took)-1]), "max_ms")
	b.ReportMetric(server[len(server)/2], "agent_p50_ms")
}
