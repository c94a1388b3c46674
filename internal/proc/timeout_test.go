package proc

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/internal/stream"
)

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// TestTimeoutKillsTheGroup: a timeout ends the whole command, not only
// its leader: a child that ignores SIGTERM is killed once the grace runs
// out, before the stream ends.
func TestTimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	m := testManager(t)
	s, err := m.Exec(ExecOptions{
		Spec:    Spec{Argv: []string{"sh", "-c", `(trap "" TERM; exec sleep 300) & echo $!; wait`}},
		Timeout: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	out, end := readAll(t, s)
	child, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("output %q", out)
	}
	defer syscall.Kill(child, syscall.SIGKILL)
	if end.Reason != stream.ReasonExit || end.Signal != "SIGTERM" {
		t.Fatalf("end %+v, want the leader killed by SIGTERM", end)
	}
	deadline := time.Now().Add(10 * time.Second) // reaping may lag a little
	for alive(child) {
		if time.Now().After(deadline) {
			t.Fatalf("the child that ignores SIGTERM (pid %d) outlived the command's timeout", child)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExitEndOfSignalDeath: a command killed by a signal ends with that
// signal and no exit code, never with exit code 0.
func TestExitEndOfSignalDeath(t *testing.T) {
	t.Parallel()
	m := testManager(t)
	for _, c := range []struct {
		script, signal string
		code           int
	}{
		{"kill -KILL $$", "SIGKILL", -1},
		{"kill -TERM $$", "SIGTERM", -1},
		{"kill -INT $$", "SIGINT", -1},
		{"exit 0", "", 0},
		{"exit 137", "", 137},
	} {
		s, err := m.Exec(ExecOptions{Spec: Spec{Argv: []string{"sh", "-c", c.script}}})
		if err != nil {
			t.Fatal(err)
		}
		_, end := readAll(t, s)
		code := -1
		if end.ExitCode != nil {
			code = *end.ExitCode
		}
		if end.Reason != stream.ReasonExit || end.Signal != c.signal || code != c.code {
			t.Errorf("%s: end %+v (exit code %d), want signal %q, exit code %d", c.script, end, code, c.signal, c.code)
		}
		if c.signal != "" {
			b, _ := json.Marshal(end.Fields())
			if want := `"exit_code":null`; !strings.Contains(string(b), want) || !strings.Contains(string(b), `"signal":"`+c.signal+`"`) {
				t.Errorf("%s: end %s, want %s and signal %s", c.script, b, want, c.signal)
			}
		}
	}
}
