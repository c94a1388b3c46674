package envdapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/rayito/rayito-agent/internal/stream"
)

func TestBasicUser(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		header, user string
		err          error
	}{
		{"", "", nil},
		{"Basic cm9vdDo=", "root", nil},             // what the SDK sends for user root
		{"basic dXNlcjo=", "user", nil},             // scheme case does not matter
		{"Basic dXNlcjpwYXNzd29yZA==", "user", nil}, // a password is ignored
		{"Bearer some-token", "", nil},              // not a user: a proxy's
		{"Basic !!!", "", errBadBasicUser},
		{"Basic", "", errBadBasicUser},
	} {
		h := http.Header{}
		if c.header != "" {
			h.Set("Authorization", c.header)
		}
		user, err := basicUser(h)
		if user != c.user || !errors.Is(err, c.err) {
			t.Errorf("%q: got %q %v, want %q %v", c.header, user, err, c.user, c.err)
		}
	}
}

// The end shapes are envd's, as the SDK reads them into exitCode and error.
func TestEndEvent(t *testing.T) {
	t.Parallel()
	code := func(n int) *int { return &n }
	for _, c := range []struct {
		end      stream.End
		exitCode int32
		exited   bool
		status   string
		hasError bool
	}{
		{stream.End{Reason: stream.ReasonExit, ExitCode: code(0)}, 0, true, "exit status 0", false},
		{stream.End{Reason: stream.ReasonExit, ExitCode: code(3)}, 3, true, "exit status 3", true},
		{stream.End{Reason: stream.ReasonExit, Signal: "SIGKILL"}, -1, false, "signal: killed", true},
		{stream.End{Reason: stream.ReasonExit, Signal: "SIGTERM"}, -1, false, "signal: terminated", true},
		{stream.End{Reason: stream.ReasonExit, Signal: "SIGRTMAX-3"}, -1, false, "signal: SIGRTMAX-3", true},
		{stream.End{Reason: stream.ReasonError, Message: "the agent shut down"}, -1, false, "the agent shut down", true},
	} {
		ev := endEvent(c.end)
		if ev.ExitCode != c.exitCode || ev.Exited != c.exited || ev.Status != c.status || (ev.Error != nil) != c.hasError {
			t.Errorf("%+v: got %v", c.end, ev)
		}
		if ev.Error != nil && *ev.Error != c.status {
			t.Errorf("%+v: error %q, want the status", c.end, *ev.Error)
		}
	}
	// The OOM killer's victim: envd's words for the signal, and why.
	ev := endEvent(stream.End{Reason: stream.ReasonOOMKilled, Signal: "SIGKILL", Message: "killed by the kernel's OOM killer"})
	if ev.ExitCode != -1 || ev.Exited || ev.Status != "signal: killed" || ev.Error == nil || !strings.HasPrefix(*ev.Error, "oom_killed: killed by the kernel's OOM killer") {
		t.Errorf("an OOM victim's end: %v", ev)
	}
}
