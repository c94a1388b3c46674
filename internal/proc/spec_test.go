package proc

import (
	"slices"
	"testing"
)

// TestResolveEnvFollowsDefaults: the environment of requests without env
// of their own is built once, but a change of the defaults (an /v1/init)
// applies to the next request, and a request's env never leaks into the
// next one's.
func TestResolveEnvFollowsDefaults(t *testing.T) {
	d := &Defaults{}
	spec := Spec{Argv: []string{"true"}}
	env := func(s Spec) []string {
		t.Helper()
		r, err := d.Resolve(s)
		if err != nil {
			t.Fatal(err)
		}
		return r.Env
	}
	first := env(spec)
	if slices.Contains(first, "FROM_INIT=1") {
		t.Fatal("FROM_INIT set before any init")
	}
	if with := env(Spec{Argv: []string{"true"}, Env: map[string]string{"ONLY_HERE": "x"}}); !slices.Contains(with, "ONLY_HERE=x") {
		t.Fatalf("request env missing: %v", with)
	}
	if again := env(spec); slices.Contains(again, "ONLY_HERE=x") || !slices.Equal(again, first) {
		t.Fatalf("a request's env leaked into the next: %v", again)
	}
	d.Set("", "", map[string]string{"FROM_INIT": "1"})
	if after := env(spec); !slices.Contains(after, "FROM_INIT=1") {
		t.Fatalf("defaults changed, env did not: %v", after)
	}
	d.Set("", "", map[string]string{"FROM_INIT": "2"})
	if after := env(spec); !slices.Contains(after, "FROM_INIT=2") || slices.Contains(after, "FROM_INIT=1") {
		t.Fatalf("second change: %v", after)
	}
}
