package runaway

import (
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

func ms(n ...int) []time.Duration {
	var d []time.Duration
	for _, v := range n {
		d = append(d, time.Duration(v)*time.Millisecond)
	}
	return d
}

// TestReportJudgesAsTheIssueSays: the /health limit is 5 x the idle p99,
// at least 100 ms and under a second; a run within every bound has no
// problem, and each bound missed is named.
func TestReportJudgesAsTheIssueSays(t *testing.T) {
	if got := Quantile(ms(5, 1, 3, 2, 4), 50); got != 3*time.Millisecond {
		t.Errorf("p50 %v", got)
	}
	if got := Quantile(ms(1, 2, 3, 4, 100), 99); got != 100*time.Millisecond {
		t.Errorf("p99 of five %v: the slowest", got)
	}
	if Quantile(nil, 99) != 0 {
		t.Error("p99 of none")
	}
	for idle, want := range map[time.Duration]time.Duration{10 * time.Millisecond: 100 * time.Millisecond, 40 * time.Millisecond: 200 * time.Millisecond, 300 * time.Millisecond: time.Second - time.Millisecond} {
		if got := (Report{IdleHealth: []time.Duration{idle}}).HealthLimit(); got != want {
			t.Errorf("idle p99 %v: limit %v, want %v", idle, got, want)
		}
	}
	good := Report{IdleHealth: ms(10, 12), Health: ms(20, 90), Hog: client.ExitStatus{OOMKilled: true}, HogAfter: 20 * time.Second, Back: 5 * time.Millisecond}
	if p := good.Problems(); len(p) != 0 {
		t.Fatalf("a run within its bounds: %q", p)
	}
	for name, tc := range map[string]struct {
		change func(*Report)
		want   string
	}{
		"slow health":  {func(r *Report) { r.Health = append(r.Health, 150*time.Millisecond) }, "/health p99"},
		"hog late":     {func(r *Report) { r.HogAfter = 61 * time.Second }, "memory hog"},
		"hog not oom":  {func(r *Report) { r.Hog.OOMKilled = false }, "memory hog"},
		"slow back":    {func(r *Report) { r.Back = 2 * time.Second }, "load's end"},
		"never back":   {func(r *Report) { r.Back = 0 }, "load's end"},
		"probe failed": {func(r *Report) { r.Failures = []string{"exec echo ok: deadline"} }, "deadline"},
	} {
		r := good
		r.Health = append([]time.Duration(nil), good.Health...)
		tc.change(&r)
		if p := r.Problems(); len(p) != 1 || !strings.Contains(p[0], tc.want) {
			t.Errorf("%s: problems %q, want one naming %q", name, p, tc.want)
		}
	}
}

// TestExcusedProbes: a /health probe that ran while the machine under the
// guest stalled it is left out of the p99 and named in the report, the
// others still count, and an excused probe still fails at a second.
func TestExcusedProbes(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 19, 0, 0, 0, time.UTC)
	r := Report{IdleHealth: ms(10, 12), Health: ms(20, 400, 30, 20, 20, 20, 20, 20, 20, 20), Hog: client.ExitStatus{OOMKilled: true}, HogAfter: 20 * time.Second, Back: 5 * time.Millisecond}
	for i, d := range r.Health {
		from := t0.Add(time.Duration(i) * time.Second)
		r.HealthSpans = append(r.HealthSpans, Span{from, from.Add(d)})
	}
	if p := r.Problems(); len(p) != 1 || !strings.Contains(p[0], "/health p99") {
		t.Fatalf("before the excuse: %q", p)
	}
	// A stall over the first two probes: the fast one needs no excuse.
	r.Excuse(func(sp Span) string {
		if sp.From.Before(t0.Add(2 * time.Second)) {
			return "the emulator stalled"
		}
		return ""
	})
	if p := r.Problems(); len(p) != 0 {
		t.Errorf("the slow probe excused: %q", p)
	}
	if len(r.Excused) != 1 || r.Excused[1] == "" || !strings.Contains(r.String(), "excused: /health at 19:00:01.000 took 400ms while the emulator stalled") {
		t.Errorf("excused %v; report:\n%s", r.Excused, r)
	}
	r.Health[1] = 1500 * time.Millisecond
	if p := r.Problems(); len(p) != 1 || !strings.Contains(p[0], "over 1s, while the emulator stalled") {
		t.Errorf("an excused probe of 1.5 s: %q", p)
	}
	r.Health[2] = 150 * time.Millisecond
	if p := r.Problems(); len(p) != 2 {
		t.Errorf("an excused probe of 1.5 s and a slow one not excused: %q", p)
	}
	// Excuses for more than a tenth of the probes: the agent is slow.
	r = Report{IdleHealth: ms(10), Hog: client.ExitStatus{OOMKilled: true}, HogAfter: 20 * time.Second, Back: 5 * time.Millisecond}
	for i := range 20 {
		d := 20 * time.Millisecond
		if i%5 == 0 {
			d = 300 * time.Millisecond
		}
		from := t0.Add(time.Duration(i) * time.Second)
		r.Health, r.HealthSpans = append(r.Health, d), append(r.HealthSpans, Span{from, from.Add(d)})
	}
	r.Excuse(func(Span) string { return "the emulator stalled" })
	if p := r.Problems(); len(r.Excused) != 4 || len(p) != 1 || !strings.Contains(p[0], "4 of 20 /health probes") {
		t.Errorf("4 of 20 probes excused: %v, problems %q", r.Excused, p)
	}
}
