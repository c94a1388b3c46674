package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rayito/rayito-agent/internal/runaway"
)

// runRunaway is `rayito-agent runaway`: runaway user work in the sandbox
// (a memory hog, the shell's fork bomb, eight busy loops, at the default
// priority) while /health and `echo ok` are probed, to see the agent keep
// its footing. It exits 0 if it did, 1 if not.
func runRunaway(args []string, stdout, stderr io.Writer) int {
	fs := commandFlags("runaway", stderr)
	url := fs.String("url", defaultURL, "the agent's address")
	dur := fs.Duration("for", 30*time.Second, "how long the probes run under the load")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 || *dur <= 0 || *dur > 10*time.Minute {
		fmt.Fprintln(stderr, "rayito-agent runaway: --for must be from 1ns to 10m, and no arguments")
		return 2
	}
	c, err := dialAgent(*url)
	if err != nil {
		fmt.Fprintln(stderr, "rayito-agent runaway:", err)
		return exitClientError
	}
	defer c.Close()
	// Ctrl-C stops the probes; the load is killed either way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *dur+5*time.Minute)
	defer cancel()
	// The load is real: on an agent whose user work has no cgroup (one
	// run on a laptop), the fork bomb would take the whole machine.
	if h, err := c.Health(ctx); err != nil || h.Isolation == nil || h.Isolation.State != "on" {
		fmt.Fprintln(stderr, "rayito-agent runaway: refused: the agent's user work is not isolated in a cgroup (/health isolation is not on), so the load would hit the whole machine; run it against a sandbox VM (make vm)")
		return exitClientError
	}
	fmt.Fprintf(stdout, "measuring the idle agent, then %v of a memory hog, a fork bomb and eight busy loops\n", *dur)
	r, err := runaway.Run(ctx, c, *url, runaway.Options{For: *dur})
	fmt.Fprint(stdout, r)
	if err != nil {
		fmt.Fprintln(stderr, "rayito-agent runaway:", err)
		return exitClientError
	}
	if len(r.Problems()) > 0 {
		return 1
	}
	fmt.Fprintln(stdout, "the agent kept its footing")
	return 0
}
