package e2e

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

var noCgroupsImage = tokenImage{env: []string{"RAYITO_CGROUPS=false"}}

// TestIsolationExecCost measures what being born in the user cgroup costs
// an exec: /bin/true through the agent of a VM with isolation on and of
// one with it off (--cgroups=false), in blocks of 20 that alternate, in
// the same run. Not in make test (RAYITO_E2E_BENCH=1): it reports, it
// checks nothing but that both ran.
func TestIsolationExecCost(t *testing.T) {
	if os.Getenv("RAYITO_E2E_BENCH") != "1" {
		t.Skip("a measurement: RAYITO_E2E_BENCH=1")
	}
	on, off := vmConfig(t), vmConfigOf(t, &noCgroupsImage)
	vOn, vOff := bootHealthy(t, on.cfg), bootHealthy(t, off.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cOn := dial(t, ctx, vOn.AgentURL(), on.token, client.Options{})
	cOff := dial(t, ctx, vOff.AgentURL(), off.token, client.Options{})
	if h, err := cOn.Health(ctx); err != nil || h.Isolation == nil || h.Isolation.State != "on" {
		t.Fatalf("the first VM's isolation: %+v %v", h.Isolation, err)
	}
	if h, err := cOff.Health(ctx); err != nil || h.Isolation == nil || h.Isolation.State != "off" {
		t.Fatalf("the second VM's isolation: %+v %v", h.Isolation, err)
	}
	run := func(c *client.Client, n int) []time.Duration {
		var out []time.Duration
		for range n {
			started := time.Now()
			p, err := c.Exec(ctx, client.ExecOptions{Argv: []string{"/bin/true"}})
			if err != nil {
				t.Fatal(err)
			}
			if st, err := p.Wait(ctx); err != nil || st.ExitCode() != 0 {
				t.Fatal(st, err)
			}
			out = append(out, time.Since(started))
		}
		return out
	}
	run(cOn, 10) // warm both
	run(cOff, 10)
	var withCg, without []time.Duration
	for range 10 {
		withCg = append(withCg, run(cOn, 20)...)
		without = append(without, run(cOff, 20)...)
	}
	p50 := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	t.Logf("exec /bin/true p50 over %d each: in the user cgroup %v, without isolation %v: %.2fx",
		len(withCg), p50(withCg), p50(without), float64(p50(withCg))/float64(p50(without)))
}
