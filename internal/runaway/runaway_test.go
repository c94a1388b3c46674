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
