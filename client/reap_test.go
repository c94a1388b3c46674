package client_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rayito/rayito-agent/client"
)

// zombieChildren lists the zombies whose parent is this process.
func zombieChildren() []int {
	self := os.Getpid()
	var out []int
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(b[i+1:])
		if len(fields) < 2 || string(fields[0]) != "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(string(fields[1])); ppid == self {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, pid)
		}
	}
	return out
}

// TestOrphansReaped: 10,000 short-lived grandchildren orphaned by their
// parents reparent to the agent (a child subreaper) and are all reaped.
func TestOrphansReaped(t *testing.T) {
	t.Parallel()
	const n = 10000
	c := newAgent(t).dial(t, client.Options{})
	before := testReaper(t).Orphans()
	// Each subshell starts 100 background jobs and exits without waiting,
	// orphaning them: half the forks of one subshell per orphan, which
	// matters on a busy machine where a fork costs milliseconds.
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do (%s); i=$((i+1)); done; echo spawned", n/100, strings.Repeat(": & ", 100))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := c.Exec(ctx, client.ExecOptions{Argv: sh(script)})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(ctx, p)
	if r.err != nil || string(r.stdout) != "spawned\n" || r.status.ExitCode() != 0 {
		t.Fatalf("%q %s %v", r.stdout, code(r.status), r.err)
	}
	eventually(t, "every orphan is reaped", func() bool {
		return testReaper(t).Orphans()-before >= n && len(zombieChildren()) == 0
	})
}
