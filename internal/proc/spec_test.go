package proc

import (
	"errors"
	"os/user"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/rayito/rayito-agent/internal/wire"
)

// Defaults.User answers who a request runs as, by the same rules as
// Resolve, read from the real user database.
func TestDefaultsUser(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody on this machine")
	}
	for _, tc := range []struct {
		def, name      string
		wantUser, home string
		wantErr        bool
	}{
		{name: "", wantUser: me.Username, home: me.HomeDir},
		{name: "nobody", wantUser: "nobody", home: nobody.HomeDir},
		{name: nobody.Uid, wantUser: "nobody", home: nobody.HomeDir},
		{def: "nobody", name: "", wantUser: "nobody", home: nobody.HomeDir},
		{def: "nobody", name: me.Username, wantUser: me.Username, home: me.HomeDir},
		{name: "no-such-user-rayito", wantErr: true},
	} {
		d := &Defaults{}
		d.Set(tc.def, "", nil)
		got, home, err := d.User(tc.name)
		if tc.wantErr {
			var we *wire.Error
			if !errors.As(err, &we) || we.Code != wire.CodeBadRequest {
				t.Errorf("User(%q) error %v, want bad_request", tc.name, err)
			}
			continue
		}
		if err != nil || got != tc.wantUser || home != tc.home {
			t.Errorf("default %q, User(%q) = %q %q %v; want %q %q", tc.def, tc.name, got, home, err, tc.wantUser, tc.home)
		}
	}
}

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

// TestResolveRefusesNUL: a NUL byte cannot reach the kernel in an
// argument, the working directory or the environment; each is
// bad_request naming what holds it.
func TestResolveRefusesNUL(t *testing.T) {
	d := &Defaults{}
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Argv: []string{"echo", "a\x00b"}}, "argv[1] contains a NUL byte"},
		{Spec{Argv: []string{"tr\x00ue"}}, "argv[0] contains a NUL byte"},
		{Spec{Argv: []string{"true"}, Cwd: "/tmp\x00x"}, "cwd contains a NUL byte"},
		{Spec{Argv: []string{"true"}, Env: map[string]string{"A": "b\x00c"}}, `environment variable A: its value holds a NUL byte`},
	} {
		_, err := d.Resolve(tc.spec)
		if err == nil {
			t.Errorf("%q: resolved, want bad_request %q", tc.spec.Argv, tc.want)
		} else if we := wire.AsError(err); we.Code != wire.CodeBadRequest || !strings.Contains(we.Message, tc.want) {
			t.Errorf("%q: %v, want bad_request %q", tc.spec.Argv, err, tc.want)
		}
	}
}

// Every signal has a name in an end: a real-time one too (the kernel's
// reseed signal, 41, once killed a kernel reported as "killed by ").
func TestSignalNames(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", 41: "SIGRT41", 64: "SIGRT64"} {
		if got := SignalName(sig); got != want {
			t.Errorf("signal %d: %q, want %q", int(sig), got, want)
		}
	}
}
