package client_test

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// startGroup starts a shell whose background child would outlive the
// shell if only the shell were killed, and returns the child's pid.
func startGroup(t *testing.T, c *client.Client, o client.ExecOptions) (*client.Process, int) {
	t.Helper()
	ctx := ctxLong(t)
	p, err := c.Exec(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child pid %q: %v", line, err)
	}
	if !procAlive(p.Pid()) || !procAlive(child) {
		t.Fatalf("leader %d or child %d not running", p.Pid(), child)
	}
	return p, child
}

// gone reports whether pid has left /proc: dead and reaped.
func gone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return os.IsNotExist(err)
}

func TestSignalKillsWholeGroup(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	ctx := ctxLong(t)
	p, child := startGroup(t, c, client.ExecOptions{Argv: sh("sleep 300 & echo $!; sleep 300")})
	if err := p.Signal(ctx, client.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.Signal != "SIGKILL" || st.ExitCode() != 137 {
		t.Fatalf("wait: %s (%d) %v", code(st), st.ExitCode(), err)
	}
	eventually(t, "the leader and its background child are gone", func() bool { return gone(p.Pid()) && gone(child) })
	if err := p.Signal(ctx, client.SIGTERM); !client.HasCode(err, client.CodeConflict) {
		t.Fatalf("signal to an ended process: %v", err)
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	c := newAgent(t).dial(t, client.Options{})
	cases := []struct {
		name, script string
		signal       client.Signal
	}{
		{"term", "sleep 300 & echo $!; sleep 300", "SIGTERM"},
		// A group that ignores TERM gets KILL after the 2 s grace.
		{"kill", `trap "" TERM; sleep 300 & echo $!; sleep 300`, "SIGKILL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxLong(t)
			start := time.Now()
			p, child := startGroup(t, c, client.ExecOptions{Argv: sh(tc.script), Timeout: 300 * time.Millisecond})
			st, err := p.Wait(ctx)
			if err != nil || st.Signal != tc.signal {
				t.Fatalf("wait: %s %v, want killed by %s", code(st), err, tc.signal)
			}
			if took := time.Since(start); took < 300*time.Millisecond {
				t.Fatalf("killed after %v, before the timeout", took)
			}
			eventually(t, "the background child is gone", func() bool { return gone(child) })
		})
	}
}
